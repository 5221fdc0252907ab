"""Starting one command in its sandbox, fast (DESIGN §4 "The shell"; the goal: ≤ 10 ms added
per command).

bwrap is started *ahead*, before the command is known: `bwrap --unshare-all --args FD -- bash
-c TRAMPOLINE` blocks reading its options from a pipe (`--args`), already exec'd, already
moved into a fresh cgroup (moving a process costs an RCU grace period: ~1.5 ms idle, ~10 ms
on a loaded machine), with its status, block, seccomp and output pipes made. When the
command comes, the server writes the options (box.py: what it sees; the command itself as
`__sandbox_command`, which the trampoline evaluates in the same bash, unexported) and closes the
pipe; bwrap makes the sandbox, reports its PID 1 (`--json-status-fd`) and waits on
`--block-fd` while the server sets PID 1's rlimits with `prlimit(2)` (RLIMIT_NPROC,
RLIMIT_FSIZE, no core; RLIMIT_AS without a cgroup) and attaches the egress proxy
(`ready`); the command, forked by PID 1 after the block, inherits them all. bwrap loads the
seccomp filter (syscalls.py) just before it runs the command.

One such *spare* waits per set of limits; the keeper thread (limits.later) makes the next
when a command ends (not while it runs: the move into a cgroup holds back every fork on the
machine meanwhile), so a command finds one ready unless another runs at the same time
(then one is made on the spot, the same way) or none has ended yet. A spare holds nothing
of any session: until its options come it is a bwrap blocked in `read`; if the server dies
first, the pipe's end gives it no options, and with `--unshare-all` and no mount bwrap has
no bash to run.

Where a bound cannot be put on, the sandbox is killed before the command runs, and OSError
is raised: a command never runs with fewer bounds than asked."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from server.agent.sandbox import box, syscalls
from server.agent.sandbox.limits import Cgroup, Limits, later

TRAMPOLINE = 'export -n __sandbox_command; eval "$__sandbox_command"'
COMMAND_VAR = "__sandbox_command"


class Started:
    """A sandboxed command that runs: its bwrap process (`proc`, the leader of its own
    process group), the sandbox's PID 1 as the host sees it (None: bwrap failed before
    making one; its error is on the output), its output (stdout and stderr together), and
    its cgroup (None without one)."""

    def __init__(self, proc: subprocess.Popen[bytes], output: IO[bytes], status_fd: int,
                 cgroup: Cgroup | None) -> None:
        self.proc, self.output, self.cgroup = proc, output, cgroup
        self.pid1: int | None = None
        self.ready_error: OSError | None = None  # what `ready` raised
        self._status_fd = status_fd
        self.after: Callable[[], None] | None = None  # on the keeper thread, after close

    def close(self) -> None:
        """After the command's end (bwrap writes its exit status on the status pipe too: kept
        open until then, else SIGPIPE). The output is the reader's to close."""
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1
            if self.after is not None:
                later(self.after)


class _Pending:
    """A bwrap started ahead, waiting for its options (see the module's docstring)."""

    def __init__(self, tail: Sequence[str], limits: Limits, cgroup: Cgroup | None) -> None:
        tool = box.bwrap()
        if tool is None:
            raise FileNotFoundError("bwrap (bubblewrap) is not installed")
        self.limits, self.cgroup = limits, cgroup
        args_r, self.args_w = os.pipe()  # bwrap reads its options
        self.status_r, self.status_w = os.pipe()  # bwrap writes its status
        self.block_r, self.block_w = os.pipe()  # bwrap waits on it
        out_r, out_w = os.pipe()  # the command's stdout and stderr
        self.filter_r = -1
        theirs = [args_r, self.status_w, self.block_r, out_w]  # kept at the same numbers
        program = syscalls.program()
        try:
            if program is not None:
                self.filter_r, filter_w = os.pipe()
                theirs.append(self.filter_r)
                os.write(filter_w, program)  # well under a pipe's buffer
                os.close(filter_w)
            # env={}: not even bwrap (the sandbox's PID 1 is a fork of it) holds the server's
            # environment; a session of its own: killpg ends bwrap, and its PID 1 with it.
            self.proc = subprocess.Popen(
                [tool, "--unshare-all", "--args", str(args_r), "--", *tail],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, start_new_session=True,
                env={}, pass_fds=tuple(fd for fd in theirs if fd != out_w))
        except OSError:
            for fd in (self.args_w, self.status_r, self.block_w, out_r):
                os.close(fd)
            if cgroup is not None:
                cgroup.close()
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        self.output = open(out_r, "rb", buffering=65536)  # noqa: SIM115 - the reader's
        if cgroup is not None:
            try:
                cgroup.join([self.proc.pid])
            except OSError:
                self.discard()
                raise

    def seccomp_fd(self) -> int | None:
        return self.filter_r if self.filter_r >= 0 else None

    def discard(self) -> None:
        """Never used: ended, its pipes closed, its cgroup removed."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for fd in (self.args_w, self.status_r, self.block_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.output.close()
        if self.cgroup is not None:
            self.cgroup.close()


def start(argv: Sequence[str], *, workdir: Path, env: Mapping[str, str],
          readonly: Sequence[Path] = (), limits: Limits = box.DEFAULT,
          cgroup: Cgroup | None = None, ready: Callable[[int], None] | None = None
          ) -> Started:
    """Run `argv` in a sandbox (box.py), bounded by `limits` and `cgroup` (joined now) from
    its first instruction. `ready(pid1)` runs before the command starts; an OSError it
    raises is kept in `ready_error` for the caller to report (the command still runs)."""
    return _go(_Pending(argv, limits, cgroup), workdir, env, readonly, ready)


def shell(command: str, *, workdir: Path, env: Mapping[str, str],
          readonly: Sequence[Path] = (), limits: Limits = box.DEFAULT, cgroup: bool = True,
          ready: Callable[[int], None] | None = None) -> Started:
    """Run `bash -c command` (in effect) in a sandbox, on a spare made ahead where one is
    ready: bounded by `limits`, in a cgroup of its own when `cgroup`. As `start`."""
    with _spares_lock:
        pending = _spares.pop((limits, cgroup), None)
    if pending is not None and pending.proc.poll() is not None:  # killed meanwhile
        pending.discard()
        pending = None
    if pending is None:
        pending = _Pending(["/bin/bash", "-c", TRAMPOLINE], limits,
                           Cgroup.take(limits, "sh") if cgroup else None)
    started = _go(pending, workdir, {**env, COMMAND_VAR: command}, readonly, ready)
    # The next spare is made once this command has ended, not meanwhile: moving a process
    # into a cgroup holds back every fork on the machine for an RCU grace period.
    started.after = lambda: _make_spare(limits, cgroup)
    return started


_spares: dict[tuple[Limits, bool], _Pending] = {}
_spares_lock = threading.Lock()


def _make_spare(limits: Limits, cgroup: bool) -> None:
    """On the keeper thread: one spare ready for these limits."""
    with _spares_lock:
        if (limits, cgroup) in _spares:
            return
    made = _Pending(["/bin/bash", "-c", TRAMPOLINE], limits,
                    Cgroup.take(limits, "sh") if cgroup else None)
    with _spares_lock:
        if (limits, cgroup) not in _spares:
            _spares[(limits, cgroup)] = made
            return
    made.discard()


def _go(pending: _Pending, workdir: Path, env: Mapping[str, str], readonly: Sequence[Path],
        ready: Callable[[int], None] | None) -> Started:
    """Hand the waiting bwrap its options, put the bounds on while it waits on its block."""
    options = box.bwrap_argv(workdir, env, readonly, pending.limits)[1:]
    options += ["--json-status-fd", str(pending.status_w), "--block-fd", str(pending.block_r)]
    if pending.seccomp_fd() is not None:
        options += ["--seccomp", str(pending.seccomp_fd())]
    started = Started(pending.proc, pending.output, pending.status_r, pending.cgroup)
    go = False
    try:
        try:
            _write_all(pending.args_w, b"".join(o.encode() + b"\0" for o in options))
        finally:
            os.close(pending.args_w)
        started.pid1 = _child_pid(pending.status_r)
        if started.pid1 is not None:
            _confine(started.pid1, pending.limits, pending.cgroup is None)
            if ready is not None:
                try:
                    ready(started.pid1)
                except OSError as e:
                    started.ready_error = e
        go = True  # (without a PID 1 bwrap failed: nothing runs, its error is the output)
    finally:
        if not go:  # a bound could not be put on: the command never runs
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pending.proc.pid, signal.SIGKILL)
            pending.proc.wait()
            if pending.cgroup is not None:
                pending.cgroup.close()
            started.close()
            started.output.close()
        with contextlib.suppress(OSError):
            os.write(pending.block_w, b"go")
        os.close(pending.block_w)
    return started


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _confine(pid1: int, limits: Limits, no_cgroup: bool) -> None:
    """PID 1's rlimits, before the command exists (see the module's docstring)."""
    bounds = [(resource.RLIMIT_NPROC, limits.procs), (resource.RLIMIT_FSIZE, limits.write),
              (resource.RLIMIT_CORE, 0)]
    if no_cgroup:
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
    """None when a command can be started this way here (bwrap takes its options from a pipe
    and the seccomp filter, the rlimits can be set from outside); else the reason. Asked
    once per process."""
    if not _verdict:
        _verdict.append(_probe())
    return _verdict[0]


def _probe() -> str | None:
    with tempfile.TemporaryDirectory(prefix="braid-probe-") as tmp:
        try:
            pending = _Pending(["/bin/bash", "-c", TRAMPOLINE], box.DEFAULT, None)
            started = _go(pending, Path(tmp), {**box.base_env(), COMMAND_VAR: "echo ok"}, (),
                          None)
        except OSError as e:
            return f"the sandbox's bounds cannot be set: {e}"
        try:
            said = started.output.read()
            started.proc.wait(30)
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.proc.wait()
            return "bwrap did not finish `echo ok` in 30 s"
        finally:
            started.close()
            started.output.close()
    if started.proc.returncode != 0 or said.strip() != b"ok":
        lines = said.decode(errors="replace").strip().splitlines()
        return "bwrap cannot start a command here" + (f": {lines[-1]}" if lines else "")
    return None
