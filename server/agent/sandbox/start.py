"""Starting one command in its sandbox, fast (DESIGN §4 "The shell"; the goal: ≤ 10 ms added
per command), by making the sandbox *before* the command comes.

A `Sandbox` is made in three steps. (1) `bwrap --unshare-all --args FD -- bash -c READER` is
started with an empty environment and moved into a fresh cgroup (moving a process costs an
RCU grace period: ~1.5 ms idle, ~10 ms on a loaded machine); it blocks reading its options
from a pipe. (2) `build`: the server writes the options (box.py: what the command sees) and
closes the pipe; bwrap makes the namespaces and mounts, reports the sandbox's PID 1
(`--json-status-fd`) and waits on `--block-fd`. (3) `run`: the server writes the command into
a memfd bwrap's bash holds, sets PID 1's rlimits with `prlimit(2)` (RLIMIT_NPROC,
RLIMIT_FSIZE, no core; RLIMIT_AS without a cgroup), attaches the egress proxy (`ready`), and
lets it go: PID 1 forks bash, which reads the command with its `read` builtin and `eval`s it
(as `bash -c` would, but for the word `eval:` in a syntax error); it inherits every bound.
bwrap loads the seccomp filter (syscalls.py) just before it runs bash.

When a command ends, the keeper thread (limits.later) makes steps 1 and 2 of the next
sandbox for the same workdir, environment and limits (not while the command runs: the move
into a cgroup holds back every fork on the machine meanwhile); the next command there takes
it, if it still waits on the same folder (inode) and is less than WARM_FOR old, and runs
only step 3. At most WARM_MAX wait, oldest dropped first. A waiting sandbox runs nothing: no
command text exists in it yet, nothing of it is shared, it holds its workdir's bind mount and
empty tmpfs; if the server dies, its block pipe ends and bash reads an empty command.

Where a bound cannot be set, the sandbox is ended before the command runs, and OSError is
raised: a command never runs with fewer bounds than asked."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from server.agent.sandbox import box, syscalls
from server.agent.sandbox.limits import Cgroup, Limits, close_all, drain, later, when_idle

WARM_FOR = 60.0  # seconds a sandbox made ahead waits for its command
WARM_MAX = 8  # sandboxes made ahead at most, the oldest dropped first


class Sandbox:
    """One sandbox: its bwrap process (`proc`, the leader of its own process group), the
    sandbox's PID 1 as the host sees it (None: bwrap failed before making one; its error is
    on the output), its output (stdout and stderr together), its cgroup (None without one).
    Made in three steps: bwrap started, waiting for its options (`__init__`); the options
    given, the sandbox made, waiting on its block (`build`); the command given and let go
    (`run`)."""

    def __init__(self, tail: Sequence[str], limits: Limits, cgroup: Cgroup | None,
                 command_fd: bool = False) -> None:
        tool = box.bwrap()
        if tool is None:
            raise FileNotFoundError("bwrap (bubblewrap) is not installed")
        self.limits, self.cgroup = limits, cgroup
        self.pid1: int | None = None
        self.ready_error: OSError | None = None  # what `ready` raised in `run`
        self.after: Callable[[], None] | None = None  # on the keeper thread, after close
        self.workdir: tuple[int, int] | None = None  # (st_dev, st_ino) when built
        self.made = time.monotonic()
        args_r, self.args_w = os.pipe()  # bwrap reads its options
        self.status_r, self.status_w = os.pipe()  # bwrap writes its status
        self.block_r, self.block_w = os.pipe()  # bwrap waits on it
        out_r, out_w = os.pipe()  # the command's stdout and stderr
        self.filter_r = self.command_fd = -1
        theirs = [args_r, self.status_w, self.block_r, out_w]  # kept at the same numbers
        try:
            program = syscalls.program()
            if program is not None:
                self.filter_r, filter_w = os.pipe()
                theirs.append(self.filter_r)
                os.write(filter_w, program)  # well under a pipe's buffer
                os.close(filter_w)
            if command_fd:
                # The command's text, written (pwrite: the offset bash reads from stays 0)
                # only when it comes; bash reads it with its own builtin, no process more.
                self.command_fd = os.memfd_create("braid-command", os.MFD_CLOEXEC)
                tail = ["/bin/bash", "-c", f"IFS= read -r -d '' __sandbox_command "
                        f"<&{self.command_fd}; exec {self.command_fd}<&-; "
                        'eval "$__sandbox_command"']
            # env={}: not even bwrap (the sandbox's PID 1 is a fork of it) holds the server's
            # environment; a session of its own: killpg ends bwrap, and its PID 1 with it.
            self.proc = subprocess.Popen(
                [tool, "--unshare-all", "--args", str(args_r), "--", *tail],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, start_new_session=True,
                env={}, pass_fds=tuple(fd for fd in [*theirs, self.command_fd]
                                       if fd not in (out_w, -1)))
        except OSError:
            for fd in (self.args_w, self.status_r, self.block_w, out_r, self.command_fd):
                if fd >= 0:
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

    def build(self, workdir: Path, env: Mapping[str, str], readonly: Sequence[Path]) -> None:
        """Give bwrap its options: it makes the sandbox (namespaces, mounts) and waits."""
        options = box.bwrap_argv(workdir, env, readonly, self.limits)[1:]
        options += ["--json-status-fd", str(self.status_w), "--block-fd", str(self.block_r)]
        if self.filter_r >= 0:
            options += ["--seccomp", str(self.filter_r)]
        with contextlib.suppress(OSError):
            st = os.stat(workdir)
            self.workdir = (st.st_dev, st.st_ino)
        try:
            _write_all(self.args_w, b"".join(o.encode() + b"\0" for o in options))
        finally:
            os.close(self.args_w)
            self.args_w = -1
        self.pid1 = _child_pid(self.status_r)

    def run(self, command: str | None, ready: Callable[[int], None] | None) -> None:
        """Let the command go, bounded: PID 1's rlimits set, `ready(pid1)` run first. Where a
        bound cannot be set, the sandbox is ended and OSError raised."""
        go = False
        try:
            if command is not None:
                data = command.encode("utf-8", "surrogateescape") + b"\0"
                if os.pwrite(self.command_fd, data, 0) != len(data):
                    raise OSError("the command could not be handed to the sandbox")
            if self.pid1 is not None:
                _confine(self.pid1, self.limits, self.cgroup is None)
                if ready is not None:
                    try:
                        ready(self.pid1)
                    except OSError as e:
                        self.ready_error = e
            go = True  # (without a PID 1 bwrap failed: nothing runs, its error is the output)
        finally:
            if not go:
                self.discard()
            else:
                with contextlib.suppress(OSError):
                    os.write(self.block_w, b"go")
                os.close(self.block_w)
                self.block_w = -1

    def usable_for(self, workdir: Path) -> bool:
        """Still waiting, and `workdir` is still the folder it was built on."""
        try:
            st = os.stat(workdir)
        except OSError:
            return False
        return self.proc.poll() is None and self.workdir == (st.st_dev, st.st_ino) \
            and time.monotonic() - self.made < WARM_FOR

    def close(self) -> None:
        """After the command's end (bwrap writes its exit status on the status pipe too: kept
        open until then, else SIGPIPE). The output is the reader's to close."""
        for name in ("args_w", "block_w", "status_r", "command_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        if self.after is not None:
            after, self.after = self.after, None
            later(after)

    def discard(self) -> None:
        """Never used (or could not be bounded): ended, its pipes closed, its cgroup gone."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.after = None
        self.close()
        self.output.close()
        if self.cgroup is not None:
            self.cgroup.close()


def start(argv: Sequence[str], *, workdir: Path, env: Mapping[str, str],
          readonly: Sequence[Path] = (), limits: Limits = box.DEFAULT,
          cgroup: Cgroup | None = None, ready: Callable[[int], None] | None = None
          ) -> Sandbox:
    """Run `argv` in a sandbox (box.py), bounded by `limits` and `cgroup` (joined now) from
    its first instruction. `ready(pid1)` runs before the command starts; an OSError it
    raises is kept in `ready_error` for the caller to report (the command still runs)."""
    sandbox = Sandbox(argv, limits, cgroup)
    _build(sandbox, workdir, env, readonly)
    sandbox.run(None, ready)
    return sandbox


def shell(command: str, *, workdir: Path, env: Mapping[str, str],
          readonly: Sequence[Path] = (), limits: Limits = box.DEFAULT, cgroup: bool = True,
          ready: Callable[[int], None] | None = None) -> Sandbox:
    """Run `bash -c command` (in effect: bash reads it, then `eval`s it) in a sandbox, on one
    made ahead for this workdir where one waits: bounded by `limits`, in a cgroup of its own
    when `cgroup`. As `start`. When it ends, the next one for this workdir is made."""
    key = (os.path.realpath(workdir), tuple(sorted(env.items())),
           tuple(os.path.realpath(p) for p in readonly), limits, cgroup)
    with _warm_lock:
        sandbox = _warm.pop(key, None)
    if sandbox is not None and not sandbox.usable_for(workdir):
        sandbox.discard()
        sandbox = None
    if sandbox is None:
        sandbox = _made(workdir, env, readonly, limits, cgroup)
    sandbox.run(command, ready)
    sandbox.after = lambda: _make_warm(key, workdir, env, readonly, limits, cgroup)
    return sandbox


def _made(workdir: Path, env: Mapping[str, str], readonly: Sequence[Path], limits: Limits,
          cgroup: bool) -> Sandbox:
    sandbox = Sandbox((), limits, Cgroup.take(limits, "sh") if cgroup else None,
                      command_fd=True)
    _build(sandbox, workdir, env, readonly)
    return sandbox


def _build(sandbox: Sandbox, workdir: Path, env: Mapping[str, str],
           readonly: Sequence[Path]) -> None:
    try:
        sandbox.build(workdir, env, readonly)
    except BaseException:
        sandbox.discard()
        raise


_warm: dict[tuple[object, ...], Sandbox] = {}
_warm_lock = threading.Lock()


def _make_warm(key: tuple[object, ...], workdir: Path, env: Mapping[str, str],
               readonly: Sequence[Path], limits: Limits, cgroup: bool) -> None:
    """On the keeper thread, once a command has ended (not while it runs: moving a process
    into a cgroup holds back every fork on the machine for an RCU grace period): the next
    sandbox for the same workdir, made and waiting. The stale ones go."""
    dropped = drop_stale()
    with _warm_lock:
        if key in _warm:
            return
    if not os.path.isdir(workdir):
        return
    try:
        made = _made(workdir, env, readonly, limits, cgroup)
    except OSError:
        return
    with _warm_lock:
        kept = key not in _warm
        if kept:
            _warm[key] = made
            while len(_warm) > WARM_MAX:
                dropped.append(_warm.pop(next(iter(_warm))))
    for sandbox in dropped if kept else [*dropped, made]:
        sandbox.discard()


def _discard_stale() -> None:
    for sandbox in drop_stale():
        sandbox.discard()


when_idle(_discard_stale)


def shut() -> None:
    """A clean stop: what the keeper was given is done, the sandboxes made ahead end and
    their cgroups go (a kill -9 leaves them to the next start's `limits.sweep`)."""
    drain()
    for sandbox in drop_stale(every=True):
        sandbox.discard()
    close_all()


def drop_stale(every: bool = False) -> list[Sandbox]:
    """Take out of the waiting list the sandboxes waiting longer than WARM_FOR (all of them
    with `every`); the caller discards them."""
    now = time.monotonic()
    with _warm_lock:
        stale = [k for k, s in _warm.items() if every or now - s.made >= WARM_FOR]
        return [_warm.pop(k) for k in stale]


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
            sandbox = _made(Path(tmp), box.base_env(), (), box.DEFAULT, False)
            sandbox.run("echo ok", None)
        except OSError as e:
            return f"the sandbox's bounds cannot be set: {e}"
        try:
            said = sandbox.output.read()
            sandbox.proc.wait(30)
        except subprocess.TimeoutExpired:
            sandbox.proc.kill()
            sandbox.proc.wait()
            return "bwrap did not finish `echo ok` in 30 s"
        finally:
            sandbox.close()
            sandbox.output.close()
    if sandbox.proc.returncode != 0 or said.strip() != b"ok":
        lines = said.decode(errors="replace").strip().splitlines()
        return "bwrap cannot start a command here" + (f": {lines[-1]}" if lines else "")
    return None
