"""Shell commands' process trees (DESIGN §7 `BRAID_SHELL`: killed with all descendants).

Each command runs in its own session and process group, and carries a unique tag in its
environment (`BRAID_SHELL_TAG`). A descendant that leaves the group (`setsid`, a daemon) keeps
the tag, so when the command ends, times out or its turn is cancelled, every process holding
the tag is killed too, by scanning /proc. Resource limits are set in the child before `exec`
where the OS offers them (`resource.setrlimit`): CPU seconds, address space, file size, no
core files.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

TAG = "BRAID_SHELL_TAG"
MEMORY_LIMIT = 4 * 1024**3  # bytes of address space per process
FILE_LIMIT = 2 * 1024**3  # the largest file a command may write
_live: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}  # tag -> (cwd, process)
_lock = threading.Lock()


def new_tag() -> str:
    return secrets.token_hex(12)


def limits(cpu_seconds: float) -> Callable[[], None] | None:
    try:
        import resource
    except ImportError:  # not on this OS
        return None

    def apply() -> None:  # in the child, before exec
        for name, value in (("RLIMIT_CPU", int(cpu_seconds) + 1), ("RLIMIT_AS", MEMORY_LIMIT),
                            ("RLIMIT_FSIZE", FILE_LIMIT), ("RLIMIT_CORE", 0)):
            kind = getattr(resource, name, None)
            if kind is None:
                continue
            try:
                soft, hard = resource.getrlimit(kind)
                cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(kind, (cap, hard))
            except (ValueError, OSError):
                pass

    return apply


def register(tag: str, cwd: Path, proc: subprocess.Popen[bytes]) -> None:
    with _lock:
        _live[tag] = (str(cwd), proc)


def unregister(tag: str) -> None:
    with _lock:
        _live.pop(tag, None)


def tagged(tag: str) -> list[int]:
    """Pids of every process whose environment carries `tag` (Linux /proc; else none)."""
    needle = f"{TAG}={tag}".encode()
    pids: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return pids
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in env.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_tree(tag: str, pgid: int | None) -> None:
    """SIGKILL the command's group and every process that still carries its tag."""
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for _ in range(3):  # a process may fork while we kill: look again
        pids = [p for p in tagged(tag) if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def kill_under(cwd: Path) -> int:
    """Kill every live command started in `cwd` (a cancelled turn's workdir)."""
    with _lock:
        victims = [(tag, proc) for tag, (where, proc) in _live.items() if where == str(cwd)]
    for tag, proc in victims:
        kill_tree(tag, proc.pid)
    return len(victims)


def pid_alive(pid: int) -> bool:
    """A process with this id runs on this host (another's reused id counts: alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
