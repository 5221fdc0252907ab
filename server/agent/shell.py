"""The agent's shell tool: one command in the session's workdir (or a sub-agent's worktree),
with a timeout, its output capped (head and tail kept) and streamed as it comes.

`run_sandboxed` (BRAID_SHELL=sandbox, the default) runs it in the sandbox (agent/sandbox:
bubblewrap, a cgroup per command, the egress proxy); `run_shell` (BRAID_SHELL=host) runs it
as the server's own user, its process tree killed by tag (base/proctree.py). Either way a
command still running when its turn is stopped is killed by `kill_under` (its workdir)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from server.agent.sandbox import box, egress, start
from server.agent.sandbox.limits import Cgroup, Limits
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

    def __init__(self, limit: int, stream: OutputStream | None = None) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.half = limit // 2
        self.stream = stream

    def pump(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if self.stream is not None:
                self.stream.add(chunk)
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


class OutputStream:
    """A command's output as it comes, handed to `send` in pieces (the `tool_output` events):
    at most every `every` seconds, UTF-8 decoded across chunk boundaries, and at most
    `limit` bytes in all (then one line saying the rest is left out: the page and the
    record stay bounded, the model's result keeps its own head and tail)."""

    def __init__(self, send: Callable[[str], None], limit: int = 256 * 1024,
                 every: float = 0.1) -> None:
        self.send = send
        self.limit = limit
        self.every = every
        self.sent = 0
        self.cut = False
        self.pending = bytearray()
        self.last = 0.0
        self.lock = threading.Lock()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, chunk: bytes) -> None:
        with self.lock:
            if self.cut:
                return
            room = self.limit - self.sent - len(self.pending)
            self.pending.extend(chunk[:max(room, 0)])
            if len(chunk) > room:
                self.cut = True
        if self.cut or time.monotonic() - self.last >= self.every:
            self.flush()

    def flush(self, final: bool = False) -> None:
        with self.lock:
            data, self.pending = bytes(self.pending), bytearray()
            self.sent += len(data)
            self.last = time.monotonic()
            text = self.decoder.decode(data, final=final or self.cut)
            if self.cut and data:
                text += "\n… [the rest of the output is left out here]\n"
        if text:
            self.send(text)


@dataclass
class Sandboxing:
    """How `run_sandboxed` runs a command: its bounds, whether a cgroup holds it (limits.py),
    and `network`: given the sandbox's PID 1, serves its egress proxy and returns what stops
    it (None: loopback only)."""

    limits: Limits = field(default_factory=Limits)
    cgroup: bool = True
    network: Callable[[int], Callable[[], None]] | None = None
    output: OutputStream | None = None
    readonly: tuple[Path, ...] = ()


_running: dict[str, dict[int, Callable[[], None]]] = {}  # workdir -> {id: kill}
_running_lock = threading.Lock()


def kill_under(cwd: Path) -> int:
    """Kill every command running in `cwd` (a stopped turn's workdir), sandboxed or not."""
    with _running_lock:
        kills = list(_running.get(str(cwd), {}).values())
    for kill in kills:
        kill()
    return len(kills) + proctree.kill_under(cwd)


def run_sandboxed(command: str, *, workdir: Path, plan: Sandboxing,
                  output_limit: int = SHELL_OUTPUT_LIMIT) -> tuple[str, bool]:
    """Run `bash -c command` in the sandbox; returns (what the model reads, whether it
    failed). Nothing of it outlives this call: at its end, its timeout, its write bound and
    `kill_under`, the cgroup (or, without one, bwrap and so its PID namespace) is killed."""
    capture = _Capture(output_limit, plan.output)
    try:
        run = _Sandboxed(command, workdir, plan)
    except OSError as exc:
        return f"error: could not start the sandbox: {exc}", True
    with _running_lock:
        _running.setdefault(str(workdir), {})[id(run)] = run.kill
    try:
        why = run.wait(capture)
    finally:
        with _running_lock:
            _running.get(str(workdir), {}).pop(id(run), None)
            if not _running.get(str(workdir)):
                _running.pop(str(workdir), None)
        run.close()
    text = "\n".join([*run.notes, capture.text()]) if run.notes else capture.text()
    if why is not None:
        return f"error: {why}\n{text}", True
    return f"exit code: {run.proc.returncode}\n{text}", False


class _Sandboxed:
    """One command in its sandbox: started with the proxy attached before it runs, waited
    for, killed whole."""

    def __init__(self, command: str, workdir: Path, plan: Sandboxing) -> None:
        self.plan, self.workdir = plan, workdir
        self.notes: list[str] = []
        self.killed = threading.Event()
        self.stop_network: Callable[[], None] | None = None
        self.reader: threading.Thread | None = None
        env = box.base_env(egress.proxy_env() if plan.network else {})
        self.started = start.shell(command, workdir=workdir, env=env, readonly=plan.readonly,
                                   limits=plan.limits, cgroup=plan.cgroup, ready=self._connect)
        self.proc, self.group = self.started.proc, self.started.cgroup
        if self.started.ready_error is not None:
            e = self.started.ready_error
            self.notes.append(f"note: no network for this command ({e.strerror or e})")

    def _connect(self, pid: int) -> None:
        if self.plan.network is not None:
            self.stop_network = self.plan.network(pid)

    def kill(self) -> None:
        """From any thread (a Stop on the event loop too): one pass, no waiting."""
        self.killed.set()
        if self.group is not None:
            self.group.kill(until_empty=False)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)  # bwrap: its PID 1, and so the namespace, dies with it

    def wait(self, capture: _Capture) -> str | None:
        """Until the command ends; the reason it was ended, if it was."""
        self.reader = threading.Thread(target=capture.pump, args=(self.started.output,),
                                       daemon=True)
        self.reader.start()
        limits = self.plan.limits
        why = _watch(self.reader, self.workdir, limits, self.plan.output, self.group)
        if why is not None:
            self.kill()
        self.reader.join(5.0)
        if self.proc.poll() is None and why is None:
            # Output ended, bash still runs (it closed its output): wait for its exit.
            try:
                self.proc.wait(limits.timeout)
            except subprocess.TimeoutExpired:
                why = f"command timed out after {limits.timeout:g}s and was killed"
        if why is None and self.killed.is_set():
            why = "command was stopped"
        if why is None and self.group is not None and self.group.oom_killed():
            self.notes.append(f"note: a process was killed for using more than "
                              f"{limits.memory} bytes of memory")
        return why

    def close(self) -> None:
        if self.group is not None:
            self.group.release()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self.started.close()
        if self.stop_network is not None:
            self.stop_network()
        if self.reader is not None and not self.reader.is_alive():
            self.started.output.close()
        if self.plan.output is not None:
            self.plan.output.flush(final=True)


def _watch(reader: threading.Thread, workdir: Path, limits: Limits,
           output: OutputStream | None, group: Cgroup | None) -> str | None:
    """Wait for the command's output to end; the reason to kill it, if any: its time is up,
    or it wrote more than its bound (RLIMIT_FSIZE bounds each file, the tmpfs sizes /tmp and
    $HOME; this bounds many files together): counted by its cgroup's processes' own I/O
    accounting, or, without a cgroup, by the disk's free space falling meanwhile."""
    deadline = time.monotonic() + limits.timeout
    start = _free(workdir) if group is None else None
    while True:
        reader.join(min(0.1, max(deadline - time.monotonic(), 0)))
        if output is not None:
            output.flush()
        if not reader.is_alive():
            return None
        if time.monotonic() >= deadline:
            return f"command timed out after {limits.timeout:g}s and was killed"
        if group is not None and group.written() > limits.write:
            return f"command wrote more than {limits.write} bytes and was killed"
        if start is not None and (now := _free(workdir)) is not None \
                and start - now > limits.write:
            return f"command wrote more than {limits.write} bytes and was killed"


def _free(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def run_shell(command: str, *, cwd: Path, timeout: float,
              output_limit: int = SHELL_OUTPUT_LIMIT,
              output: OutputStream | None = None) -> tuple[str, bool]:
    """Run `bash -c command` in `cwd` as the server's own user (BRAID_SHELL=host); returns
    (what the model reads, whether it failed)."""
    capture = _Capture(output_limit, output)
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
    if output is not None:
        output.flush(final=True)
    text = capture.text()
    if timed_out:
        return f"error: command timed out after {timeout:g}s and was killed\n{text}", True
    # A non-zero exit is a normal outcome for the model to read (a failing test, say), not a
    # failure of the tool itself.
    return f"exit code: {proc.returncode}\n{text}", False
