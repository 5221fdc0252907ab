"""The agent's shell tool: one command in the session's workdir, with a timeout, its whole
process group killed on timeout, and its output capped (head and tail kept)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from server.base import proctree

T = TypeVar("T")

SHELL_OUTPUT_LIMIT = 20_000


async def on_own_thread(fn: Callable[[], T], name: str) -> T:
    """Run `fn()` (a shell command: it may take minutes) on a thread of its own, so neither
    the session's git lane nor a shared pool's thread waits for it meanwhile. The thread
    ends with the command; a caller that stops waiting leaves it to finish (its process tree
    is killed by the caller's cancel, `proctree.kill_under`)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if done.done():  # the caller stopped waiting
            return
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (False, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is gone (the process is stopping)
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    return await done


class _Capture:
    """A command's output read as it comes, keeping only the head and the tail: a chatty
    command must not fill memory, and errors usually sit at the end."""

    def __init__(self, limit: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.half = limit // 2

    def pump(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head.extend(chunk[:room])
                chunk = chunk[room:]
            if chunk:
                self.tail.extend(chunk)
                if len(self.tail) > self.half:
                    self.tail = self.tail[-self.half:]

    def text(self) -> str:
        output = bytes(self.head)
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted > 0:
            output += f"\n... [{omitted} bytes of output omitted] ...\n".encode()
        output += bytes(self.tail)
        return output.decode("utf-8", errors="replace")


def run_shell(command: str, *, cwd: Path, timeout: float,
              output_limit: int = SHELL_OUTPUT_LIMIT) -> tuple[str, bool]:
    """Run `bash -c command` in `cwd`; returns (what the model reads, whether it failed)."""
    capture = _Capture(output_limit)
    tag = proctree.new_tag()
    try:
        # A new session makes the command's whole process tree one group we can kill; the
        # tag in its environment finds the descendants that left the group (`setsid`).
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, proctree.TAG: tag},
            preexec_fn=proctree.limits(timeout),  # noqa: PLW1509 - only setrlimit calls
        )
    except OSError as exc:
        return f"error: could not start bash: {exc}", True
    proctree.register(tag, cwd, proc)
    reader = threading.Thread(target=capture.pump, args=(proc.stdout,), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    # EOF on the pipe, not the exit of bash, tells that output is complete; a background
    # child holding the pipe open counts as still running.
    reader.join(timeout)
    timed_out = reader.is_alive()
    if not timed_out:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        # Kill the group before reaping bash, while its id still names this group, and
        # every process that left it but still carries the tag.
        proctree.kill_tree(tag, proc.pid)
        proc.wait()
        reader.join(2.0)
    # A daemon the command left behind (`setsid cmd &`) ends with the command.
    proctree.kill_tree(tag, None)
    proctree.unregister(tag)
    # Closing while the reader is still blocked (a process that escaped the group holds the
    # pipe) would wait on the reader's lock; leave that stream to the daemon thread instead.
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()
    text = capture.text()
    if timed_out:
        return f"error: command timed out after {timeout:g}s and was killed\n{text}", True
    # A non-zero exit is a normal outcome for the model to read (a failing test, say), not a
    # failure of the tool itself.
    return f"exit code: {proc.returncode}\n{text}", False
