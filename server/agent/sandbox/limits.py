"""A command's bounds and its end, one cgroup per command (DESIGN §4 "The shell": processes,
memory; nothing outlives it).

Why cgroups: this server often runs as root, and for root an rlimit does not hold
(`RLIMIT_NPROC` is not checked for a process with CAP_SYS_RESOURCE, and counts every
process of the uid, the server's too). A `pids` cgroup counts the command's tasks and no
one else's; a `memory` cgroup bounds what it holds (its tmpfs pages included); and the
cgroup's member list is what is killed at the end, whatever the processes did to their
session, group or parent. cgroup v1 (`/sys/fs/cgroup/pids`, `/memory`) and v2 (one unified
tree) are both read. Where no cgroup can be made (an unprivileged server without a delegated
subtree) the command still runs in its own PID namespace, ended with it, and bounded by the
rlimits box.py sets inside the sandbox; `Cgroup.make` then returns None and `why_not` says why.

Every cgroup of this server sits under `braid-<pid>` in the server's own cgroup (so the
server's own bounds still hold), and `sweep` at start-up kills and removes those of a
server that is gone (kill -9 during a command): nothing of it survives a restart.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("pids", "memory")
PREFIX = "braid-"


@dataclass(frozen=True)
class Limits:
    """A command's bounds (BRAID_SHELL_MAX_PROCS, _MAX_MEMORY, _MAX_WRITE, _TIMEOUT)."""

    procs: int = 256
    memory: int = 2 * 1024**3  # bytes
    write: int = 2 * 1024**3  # bytes written per command (per file, tmpfs, disk)
    timeout: float = 600.0  # seconds


def _own(controller: str) -> Path | None:
    """This process's cgroup folder for `controller` (v1), or the unified one (v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            base = ROOT / controller
            return base / path.lstrip("/") if base.is_dir() else None
    if (ROOT / "cgroup.controllers").exists():  # v2 only
        for line in lines:
            if line.startswith("0::"):
                return ROOT / line[3:].lstrip("/")
    return None


def _homes() -> dict[str, Path]:
    """controller -> this server's folder for its commands' cgroups (v1: one per controller;
    v2: the same folder for both)."""
    homes: dict[str, Path] = {}
    for controller in CONTROLLERS:
        own = _own(controller)
        if own is None:
            continue
        homes[controller] = own / f"{PREFIX}{_me()}"
    return homes


def _started(pid: int | str) -> str | None:
    """A process's start time (clock ticks since boot): with its pid, a name no later
    process takes."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _me() -> str:
    return f"{os.getpid()}-{_started('self')}"


_verdict: list[str | None] = []


def why_not() -> str | None:
    """None when this process can make a command's cgroup; else the reason (asked once)."""
    if not _verdict:
        _verdict.append(_probe())
    return _verdict[0]


def _probe() -> str | None:
    try:
        probe = Cgroup.make(Limits(), "probe")
    except OSError as e:
        return f"cannot make a cgroup: {e}"
    if probe is None:
        return "no pids and memory cgroup controllers"
    probe.close()
    return None


class Cgroup:
    """One command's cgroup(s): made before it starts, joined by its first process
    (`join_script`), killed and removed when it ends."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @classmethod
    def make(cls, limits: Limits, name: str = "") -> Cgroup | None:
        homes = _homes()
        if set(homes) != set(CONTROLLERS):
            return None
        leaf = f"{name or 'cmd'}-{secrets.token_hex(6)}"
        folders: list[Path] = []
        try:
            for controller, home in homes.items():
                home.mkdir(exist_ok=True)
                folder = home / leaf
                if folder in folders:  # v2: one folder holds both
                    continue
                if (home / "cgroup.subtree_control").exists():  # v2: enable in the parent
                    with contextlib.suppress(OSError):
                        (home / "cgroup.subtree_control").write_text("+pids +memory")
                folder.mkdir()
                folders.append(folder)
                _limit(folder, controller, limits)
        except OSError:
            Cgroup(folders).close()
            raise
        return cls(folders)

    @classmethod
    def take(cls, limits: Limits, name: str = "") -> Cgroup | None:
        """A new cgroup for one command, made ahead of it when one is ready (the next one is
        made meanwhile, off the command's path: making one costs about a millisecond)."""
        with _spares_lock:
            spare = _spares.pop((limits, name), None)
        made = spare if spare is not None else cls.make(limits, name)
        if made is not None:
            later(lambda: _make_spare(limits, name))
        return made

    def join(self, pids: list[int]) -> None:
        """Move these processes (and their threads) into the cgroup: what they fork after
        this is counted and killed with it."""
        for path in self.procs_files():
            for pid in pids:
                path.write_text(str(pid))

    def release(self) -> None:
        """The end of a command that `take` gave its cgroup: every process in it gets SIGKILL
        now; waiting until the kernel has reaped them (a few ms: a sandbox's PID 1 is still
        exiting when bwrap reports the command's end) and removing the cgroup are left to a
        thread of their own, off the command's path."""
        self.kill(until_empty=False)
        later(self.close)

    def procs_files(self) -> list[Path]:
        return [f / "cgroup.procs" for f in self.folders]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.procs_files():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in path.read_text().split())
        return sorted(found)

    def written(self) -> int:
        """Bytes the command's processes sent to storage so far (`write_bytes` of
        /proc/PID/io). A process's count holds those of the children it reaped, and the
        sandbox's PID 1 reaps every orphan, so the live members' sum is the whole command's."""
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
        return total

    def oom_killed(self) -> bool:
        """Whether the memory bound killed a process of the command."""
        for folder in self.folders:
            for name in ("memory.oom_control", "memory.events"):
                with contextlib.suppress(OSError):
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key in ("oom_kill", "oom_kill ") and value.strip() not in ("", "0"):
                            return True
        return False

    def kill(self, *, until_empty: bool = True) -> None:
        """SIGKILL every process in the cgroup until none is left (a fork during the sweep
        joins the cgroup, so the next look finds it); one pass only, without waiting, when
        `until_empty` is False (a caller on the event loop: the command's own thread then
        finishes the job)."""
        if until_empty:
            _kill_all(self)
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        for folder in self.folders:
            _remove(folder)


_spares: dict[tuple[Limits, str], Cgroup] = {}
_spares_lock = threading.Lock()
_chores: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_keeper: list[threading.Thread] = []


def later(chore: Callable[[], None]) -> None:
    """Run `chore` on this process's one keeper thread (started on first use, never ending:
    a process it starts keeps its parent-death signal, bound to the starting thread, for
    as long as the server lives)."""
    _chores.put(chore)
    with _spares_lock:
        if not _keeper:
            _keeper.append(threading.Thread(target=_keep, name="cgroup-keeper", daemon=True))
            _keeper[0].start()


def drain(timeout: float = 5.0) -> bool:
    """Wait until the keeper has done what it was given so far (a clean stop leaves no
    cgroup behind); False if it had not within `timeout` seconds."""
    done = threading.Event()
    later(done.set)
    return done.wait(timeout)


def close_all() -> None:
    """A clean stop, once no command runs: the cgroups made ahead go, then this server's
    folder (`braid-<pid>-<start>`) if nothing is left in it."""
    with _spares_lock:
        spares = list(_spares.values())
        _spares.clear()
    for group in spares:
        group.close()
    drain()
    for home in _homes().values():
        with contextlib.suppress(OSError):
            home.rmdir()


_idle: list[Callable[[], None]] = []


def when_idle(chore: Callable[[], None]) -> None:
    """Run `chore` on the keeper thread whenever it has had nothing to do for 30 s."""
    _idle.append(chore)


def _keep() -> None:
    while True:
        try:
            chores = [_chores.get(timeout=30)]
        except queue.Empty:
            chores = list(_idle)
        for chore in chores:
            with contextlib.suppress(OSError):
                chore()


def _make_spare(limits: Limits, name: str) -> None:
    with _spares_lock:
        if (limits, name) in _spares:
            return
    made = Cgroup.make(limits, name)
    if made is None:
        return
    with _spares_lock:
        if (limits, name) not in _spares:
            _spares[(limits, name)] = made
            return
    made.close()


def _limit(folder: Path, controller: str, limits: Limits) -> None:
    v2 = (folder / "cgroup.type").exists()
    if controller == "pids":
        (folder / "pids.max").write_text(str(limits.procs))
    elif v2:
        (folder / "memory.max").write_text(str(limits.memory))
        with contextlib.suppress(OSError):
            (folder / "memory.swap.max").write_text("0")
    else:
        (folder / "memory.limit_in_bytes").write_text(str(limits.memory))
        with contextlib.suppress(OSError):  # no swap accounting: nothing to bound
            (folder / "memory.memsw.limit_in_bytes").write_text(str(limits.memory))


def _kill_all(group: Cgroup) -> None:
    for _ in range(200):
        pids = group.pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _remove(folder: Path) -> None:
    for _ in range(200):  # a killed process leaves the cgroup when it is reaped
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def sweep() -> int:
    """Kill and remove the commands' cgroups of servers that are gone (at start-up: a kill
    -9 during a command leaves them, and their processes, behind). Returns how many."""
    gone = 0
    for controller in CONTROLLERS:
        own = _own(controller)
        if own is None or not own.is_dir():
            continue
        for home in own.glob(f"{PREFIX}*"):
            pid, _, started = home.name[len(PREFIX):].partition("-")
            if home.name == f"{PREFIX}{_me()}" or (started and _started(pid) == started):
                continue  # this process's own, or another server's that runs
            for folder in [p for p in home.iterdir() if p.is_dir()]:
                Cgroup([folder]).close()
                gone += 1
            _remove(home)
    return gone

