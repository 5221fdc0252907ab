"""A file system that can lose power: what a test needs to check DESIGN "Durability".

`PowerCutFS` is an in-memory FUSE file system (fusepy, on Debian's libfuse2) that keeps two
states of everything: what programs see now, and what a disk would still hold after a power
cut, under the strictest reading of POSIX (as LazyFS does for Jepsen):

- a file's data reaches the durable state only when the file is fsynced (`fsync`,
  `fdatasync`): until then a cut gives back the data of its last fsync (none: an empty file);
- a name (a create, a rename, an unlink, a link, a mkdir) reaches it only when its folder is
  fsynced: until then a cut gives back the folder's entries as of its last fsync. A new file
  whose folder was never synced is gone after a cut, whatever its own fsyncs.

`Mount(folder)` runs it in a process of its own at `folder/mnt`; `cut()` is the power cut:
the file system is unmounted (the kernel's caches go with it) and its process writes only
the durable state to `folder/state.pickle`; `start()` mounts that again. Kill every process
using the mount first (a power cut stops them too). Run as a script:
`python tests/powercut.py MOUNTPOINT STATE` (foreground; SIGTERM or an unmount ends it).
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT_INO = 1


@dataclass
class Node:
    mode: int  # with the file type bits
    data: bytearray = field(default_factory=bytearray)  # a file's data now
    durable: bytes = b""  # its data as of its last fsync
    entries: dict[str, int] = field(default_factory=dict)  # a folder's names now
    durable_entries: dict[str, int] = field(default_factory=dict)  # as of its last fsync
    target: str = ""  # a symlink's
    nlink: int = 1
    times: list[float] = field(default_factory=lambda: [time.time()] * 3)  # a, m, c


def durable_state(nodes: dict[int, Node]) -> dict[int, Node]:
    """What a power cut leaves: the folders' synced entries from the root down, each file
    with its synced data. A folder reached twice (a rename synced on one side only) is kept
    at its first name."""
    out: dict[int, Node] = {}
    todo = [ROOT_INO]
    while todo:
        ino = todo.pop()
        if ino in out or ino not in nodes:
            continue
        old = nodes[ino]
        node = Node(old.mode, bytearray(old.durable), old.durable, target=old.target,
                    times=list(old.times))
        if stat.S_ISDIR(old.mode):
            entries = {n: i for n, i in old.durable_entries.items()
                       if i in nodes and not (stat.S_ISDIR(nodes[i].mode) and i in out)}
            node.entries = dict(entries)
            node.durable_entries = dict(entries)
            todo.extend(entries.values())
        out[ino] = node
    links: dict[int, int] = {}
    for node in out.values():
        for child in node.entries.values():
            links[child] = links.get(child, 0) + 1
    for ino, node in out.items():
        node.nlink = links.get(ino, 1) + (1 if stat.S_ISDIR(node.mode) else 0)
    return out


def _fail(code: int) -> Exception:
    from fuse import FuseOSError

    return FuseOSError(code)


class PowerCutFS:
    """The fusepy operations over `nodes` (one lock: fusepy calls from several threads).
    A file handle is the inode number, so an open file unlinked meanwhile still works."""

    def __init__(self, nodes: dict[int, Node] | None = None) -> None:
        root = Node(stat.S_IFDIR | 0o755, nlink=2)
        self.nodes: dict[int, Node] = nodes or {ROOT_INO: root}
        self.next_ino = max(self.nodes) + 1
        self.lock = threading.Lock()

    def __call__(self, op: str, path: str | None, *args: Any) -> Any:
        method = getattr(self, op, None)
        if method is None:
            raise _fail(errno.ENOSYS)
        with self.lock:
            return method(path, *args)

    # -- names ----------------------------------------------------------------------------

    def _lookup(self, path: str) -> int:
        ino = ROOT_INO
        for name in path.strip("/").split("/"):
            if not name:
                continue
            node = self.nodes[ino]
            if not stat.S_ISDIR(node.mode):
                raise _fail(errno.ENOTDIR)
            if name not in node.entries:
                raise _fail(errno.ENOENT)
            ino = node.entries[name]
        return ino

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self.nodes[self._lookup(head or "/")]
        if not stat.S_ISDIR(parent.mode):
            raise _fail(errno.ENOTDIR)
        return parent, name

    def _make(self, path: str, node: Node) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise _fail(errno.EEXIST)
        ino = self.next_ino
        self.next_ino += 1
        self.nodes[ino] = node
        parent.entries[name] = ino
        parent.times[1] = parent.times[2] = time.time()
        return ino

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh:
            return self.nodes[fh]
        assert path is not None
        return self.nodes[self._lookup(path)]

    # -- the operations -------------------------------------------------------------------

    def init(self, path: str) -> None:
        return None

    def destroy(self, path: str) -> None:
        return None

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        ino = fh or self._lookup(path)
        node = self.nodes[ino]
        size = len(node.data) if stat.S_ISREG(node.mode) else \
            len(node.target.encode()) if stat.S_ISLNK(node.mode) else 4096
        return {"st_mode": node.mode, "st_nlink": node.nlink, "st_size": size,
                "st_ino": ino, "st_uid": os.getuid(), "st_gid": os.getgid(),
                "st_atime": node.times[0], "st_mtime": node.times[1],
                "st_ctime": node.times[2], "st_blocks": (size + 511) // 512}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self.nodes[self._lookup(path)].entries]

    def opendir(self, path: str) -> int:
        return self._lookup(path)

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._make(path, Node(stat.S_IFDIR | (mode & 0o7777), nlink=2))
        return 0

    def rmdir(self, path: str) -> int:
        parent, name = self._parent(path)
        ino = self._lookup(path)
        if self.nodes[ino].entries:
            raise _fail(errno.ENOTEMPTY)
        del parent.entries[name]
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return self._make(path, Node(stat.S_IFREG | (mode & 0o7777)))

    def open(self, path: str, flags: int) -> int:
        ino = self._lookup(path)
        if flags & os.O_TRUNC:
            self.nodes[ino].data.clear()
        return ino

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return bytes(self.nodes[fh].data[offset:offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        node = self.nodes[fh]
        if offset > len(node.data):
            node.data.extend(b"\0" * (offset - len(node.data)))
        node.data[offset:offset + len(data)] = data
        node.times[1] = node.times[2] = time.time()
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        node = self._node(path, fh)
        del node.data[length:]
        node.data.extend(b"\0" * (length - len(node.data)))
        node.times[1] = node.times[2] = time.time()
        return 0

    def unlink(self, path: str) -> int:
        parent, name = self._parent(path)
        ino = self._lookup(path)
        del parent.entries[name]
        self.nodes[ino].nlink -= 1
        return 0

    def rename(self, old: str, new: str) -> int:
        src, old_name = self._parent(old)
        dst, new_name = self._parent(new)
        ino = self._lookup(old)
        there = dst.entries.get(new_name)
        if there is not None and there != ino:
            if stat.S_ISDIR(self.nodes[there].mode) and self.nodes[there].entries:
                raise _fail(errno.ENOTEMPTY)
            self.nodes[there].nlink -= 1
        del src.entries[old_name]
        dst.entries[new_name] = ino
        return 0

    def link(self, target: str, source: str) -> int:
        ino = self._lookup(source)
        parent, name = self._parent(target)
        if name in parent.entries:
            raise _fail(errno.EEXIST)
        parent.entries[name] = ino
        self.nodes[ino].nlink += 1
        return 0

    def symlink(self, target: str, source: str) -> int:
        self._make(target, Node(stat.S_IFLNK | 0o777, target=source))
        return 0

    def readlink(self, path: str) -> str:
        return self.nodes[self._lookup(path)].target

    def chmod(self, path: str, mode: int) -> int:
        node = self._node(path, None)
        node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> int:
        node = self._node(path, None)
        now = time.time()
        node.times[0], node.times[1] = times or (now, now)
        return 0

    def access(self, path: str, amode: int) -> int:
        self._lookup(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24, "f_bfree": 1 << 23,
                "f_bavail": 1 << 23, "f_files": 1 << 20, "f_ffree": 1 << 19,
                "f_namemax": 255}

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        return 0

    # -- what survives ----------------------------------------------------------------------

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        node = self.nodes[fh]
        node.durable = bytes(node.data)
        if stat.S_ISDIR(node.mode):  # some callers fsync a folder through a file handle
            node.durable_entries = dict(node.entries)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        node = self.nodes[fh or self._lookup(path)]
        node.durable_entries = dict(node.entries)
        return 0


def serve(mountpoint: str, state: str) -> None:
    """Mount in the foreground until unmounted or SIGTERM; then write the durable state."""
    from fuse import FUSE, Operations

    nodes: dict[int, Node] | None = None
    if os.path.exists(state):
        with open(state, "rb") as f:
            nodes = pickle.load(f)
    fs = PowerCutFS(nodes)

    class Ops(Operations):  # type: ignore[misc]  # fusepy has no type hints
        def __call__(self, op: str, *args: Any) -> Any:
            return fs(op, *args)

    def stop(signum: int, frame: Any) -> None:
        subprocess.run(["fusermount", "-u", "-z", mountpoint], check=False)

    signal.signal(signal.SIGTERM, stop)
    try:
        FUSE(Ops(), mountpoint, foreground=True, nothreads=False, hard_remove=True,
             use_ino=True, big_writes=True, max_write=1 << 20, attr_timeout=0,
             entry_timeout=0, negative_timeout=0)
    finally:
        with fs.lock:
            kept = durable_state(fs.nodes)
        tmp = f"{state}.new"
        with open(tmp, "wb") as f:
            pickle.dump(kept, f)
        os.replace(tmp, state)


class Mount:
    """A `PowerCutFS` at `folder/mnt`, its durable state kept in `folder/state.pickle`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "mnt"
        self.state = folder / "state.pickle"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0

    def start(self) -> Mount:
        self.path.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "fs.log", "ab")  # noqa: SIM115 - the process owns it
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.path), str(self.state)],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"powercut fs did not mount: "
                                   f"{(self.folder / 'fs.log').read_text()}")
            time.sleep(0.02)
        return self

    def cut(self) -> None:
        """The power cut: unmount (every user of the mount killed first), keep what was
        synced, mount again."""
        self.stop()
        self.cuts += 1
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        subprocess.run(["fusermount", "-u", "-z", str(self.path)], check=False,
                       capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount", "-u", "-z", str(self.path)], check=False,
                           capture_output=True)
        self.proc = None


def available() -> str | None:
    """Why a power-cut mount cannot be made here (None: it can)."""
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as e:
        return f"fusepy or libfuse2 missing: {e}"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    from shutil import which

    if which("fusermount") is None:
        return "no fusermount (Debian's fuse)"
    return None


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
