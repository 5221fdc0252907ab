"""Starting one command in its sandbox, fast (DESIGN §4 "The shell"; the goal: ≤ 10 ms added
per command). The server starts bwrap itself, with nothing in between, and the sandbox's
bounds are put on from outside while bwrap waits on `--block-fd` (its mounts are made
meanwhile): bwrap's two processes (the starter and the sandbox's PID 1) join the command's
cgroup, and PID 1 gets the rlimits box.py's `prlimit` sets otherwise (RLIMIT_NPROC,
RLIMIT_FSIZE, no core; RLIMIT_AS without a cgroup); the command, forked by PID 1 only once
the block is lifted, inherits both. `ready(pid)` (the egress proxy) runs in the same window.
bwrap loads the seccomp filter (syscalls.py) just before it runs the command.

Where any bound cannot be put on, the sandbox is killed before the command runs, and
`start` raises OSError: a command never runs with fewer bounds than asked."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from server.agent.sandbox import box, syscalls
from server.agent.sandbox.limits import Cgroup, Limits


class Started:
    """A sandboxed command that runs: its bwrap process (`proc`, the leader of its own
    process group) and the sandbox's PID 1 as the host sees it (None: bwrap failed before
    making one; its error is on the command's stderr)."""

    def __init__(self, proc: subprocess.Popen[bytes], pid1: int | None, status_fd: int) -> None:
        self.proc, self.pid1, self._status_fd = proc, pid1, status_fd
        self.ready_error: OSError | None = None  # what `ready` raised

    def close(self) -> None:
        """After the command's end (bwrap writes its exit status on the status pipe too: kept
        open until then, else SIGPIPE)."""
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1


def start(argv: Sequence[str], *, workdir: Path, env: Mapping[str, str],
          readonly: Sequence[Path] = (), limits: Limits = box.DEFAULT,
          cgroup: Cgroup | None = None, ready: Callable[[int], None] | None = None,
          stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None
          ) -> Started:
    """Run `argv` in a sandbox (box.py), bounded by `limits` and `cgroup` from its first
    instruction. `ready(pid1)` runs before the command starts; an OSError it raises is kept
    in `ready_error` for the caller to report (the command still runs)."""
    box_argv = box.bwrap_argv(workdir, env, readonly, limits)
    status_r, status_w = os.pipe()
    block_r, block_w = os.pipe()
    fds = [status_w, block_r]
    box_argv += ["--json-status-fd", str(status_w), "--block-fd", str(block_r)]
    program = syscalls.program()
    if program is not None:
        filter_r, filter_w = os.pipe()
        os.write(filter_w, program)  # well under a pipe's buffer
        os.close(filter_w)
        fds.append(filter_r)
        box_argv += ["--seccomp", str(filter_r)]
    try:
        # env={}: not even bwrap (the sandbox's PID 1 is a fork of it) holds the server's
        # environment; a session of its own: killpg ends bwrap, and its PID 1 with it.
        proc = subprocess.Popen([*box_argv, "--", *argv], stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=stderr, start_new_session=True, env={},
                                pass_fds=tuple(fds))
    except OSError:
        for fd in (status_r, block_w):
            os.close(fd)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    started = Started(proc, None, status_r)
    go = False
    try:
        started.pid1 = _child_pid(status_r)
        if started.pid1 is not None:
            _confine(proc.pid, started.pid1, limits, cgroup)
            if ready is not None:
                try:
                    ready(started.pid1)
                except OSError as e:
                    started.ready_error = e
        go = True  # (without a PID 1 bwrap failed: nothing runs, its error is the output)
    finally:
        if not go:  # a bound could not be put on: the command never runs
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if cgroup is not None:
                cgroup.kill(until_empty=False)
            proc.wait()
            started.close()
        with contextlib.suppress(OSError):
            os.write(block_w, b"go")
        os.close(block_w)
    return started


def _confine(starter: int, pid1: int, limits: Limits, cgroup: Cgroup | None) -> None:
    """Put the bounds on bwrap's processes before the command exists (see the module)."""
    if cgroup is not None:
        cgroup.join([starter, pid1])
    bounds = [(resource.RLIMIT_NPROC, limits.procs), (resource.RLIMIT_FSIZE, limits.write),
              (resource.RLIMIT_CORE, 0)]
    if cgroup is None:
        bounds.append((resource.RLIMIT_AS, limits.memory))
    for which, value in bounds:
        resource.prlimit(pid1, which, (value, value))


def _child_pid(fd: int) -> int | None:
    """The sandbox's PID 1 as bwrap reports it first on --json-status-fd (None: it failed)."""
    data = b""
    while b"}" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    try:
        pid = json.loads(data[:data.index(b"}") + 1]).get("child-pid")
    except ValueError:
        return None
    return pid if isinstance(pid, int) else None


_verdict: list[str | None] = []


def why_not() -> str | None:
    """None when a command can be started this way here (bwrap takes the seccomp filter, the
    rlimits can be set from outside); else the reason. Asked once per process."""
    if not _verdict:
        _verdict.append(_probe())
    return _verdict[0]


def _probe() -> str | None:
    with tempfile.TemporaryDirectory(prefix="braid-probe-") as tmp:
        try:
            started = start(["/bin/sh", "-c", "true"], workdir=Path(tmp), env=box.base_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            return f"the sandbox's bounds cannot be set: {e}"
        try:
            _, err = started.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.proc.wait()
            return "bwrap did not finish `true` in 30 s"
        finally:
            started.close()
    if started.proc.returncode != 0:
        said = err.decode(errors="replace").strip().splitlines()
        return "bwrap cannot start a command here" + (f": {said[-1]}" if said else "")
    return None
