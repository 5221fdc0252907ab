"""File operations in a user's folder through directory handles (DESIGN §4 "Boundaries",
export to a folder): every step down is `openat(parent, name, O_DIRECTORY|O_NOFOLLOW)`, every
file is made `O_CREAT|O_EXCL|O_NOFOLLOW` inside a private temporary folder (a fresh random
name, mode 0700) and renamed into place with `renameat`. No symlink is ever followed: one
where a folder must be is `Blocked`; one at a file's own name is that file (read with
readlink, replaced by rename, never written through). Linux (and other POSIX) only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Folders only walked through (never listed) need no read permission, only search: O_PATH.
# With O_DIRECTORY|O_NOFOLLOW a symlink there is ENOTDIR, never opened nor followed.
WALK_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PRIVATE_PREFIX = ".braid-export-"
_MAX_OPEN = 256  # folder handles kept open at once (a 30,000-file export has thousands)
_CHUNK = 1 << 20


class Blocked(Exception):
    """A part of a path that must be a folder is something else: never followed."""

    def __init__(self, prefix: str, what: str) -> None:
        super().__init__(f"{prefix} is a {what}, not a folder")
        self.prefix = prefix  # the path up to that part
        self.what = what  # "symlink" | "file" | "other"


# What is on disk at a path: a (blob id, mode) for a file or symlink, None when absent,
# "folder" or "other" (a socket, a device...), or Blocked (a parent is not a folder).
Disk = tuple[pygit2.Oid, int] | None | str | Blocked


def _what(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def _is_private(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def step(parent: int, name: str, prefix: str, create: bool) -> int | None:
    """The handle of folder `name` in `parent`; None when absent (and not `create`)."""
    try:
        return os.open(name, WALK_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise Blocked(prefix, _what(os.lstat(name, dir_fd=parent))) from None
    try:
        os.mkdir(name, 0o777, dir_fd=parent)  # the umask decides, as for any new folder
    except FileExistsError:
        pass  # made meanwhile: opened below, without following it either
    return step(parent, name, prefix, create=False)


def open_path(path: Path, create: bool) -> int | None:
    """A handle on the absolute folder `path`, walked down from `/` without following a
    symlink (so a part swapped for one after the path was checked is refused)."""
    fd = os.open("/", WALK_FLAGS)
    walked = ""
    for part in path.parts[1:]:
        walked = f"{walked}/{part}"
        try:
            child = step(fd, part, walked, create)
        finally:
            os.close(fd)
        if child is None:
            return None
        fd = child
    try:
        return os.open(".", DIR_FLAGS, dir_fd=fd)  # the folder itself is listed: readable
    finally:
        os.close(fd)


def blob_id(fd: int, size: int) -> pygit2.Oid:
    """The git blob id of an open file, read in chunks (never whole in memory)."""
    h = hashlib.sha1(f"blob {size}\0".encode())  # noqa: S324 - git's object id
    while chunk := os.read(fd, _CHUNK):
        h.update(chunk)
    return pygit2.Oid(hex=h.hexdigest())


class Folder:
    """An open folder (the export's target) and handles on its sub-folders."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._dirs: dict[str, int] = {}

    @classmethod
    def open(cls, path: Path, create: bool) -> Folder | None:
        fd = open_path(path, create)
        return None if fd is None else cls(fd)

    def close(self) -> None:
        self._forget()
        os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _forget(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def dir_fd(self, rel_dir: str, create: bool = False) -> int | None:
        """The handle of sub-folder `rel_dir` ("" is the folder itself); raises Blocked."""
        if not rel_dir:
            return self.fd
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        head, _, name = rel_dir.rpartition("/")
        parent = self.dir_fd(head, create)
        if parent is None:
            return None
        fd = step(parent, name, rel_dir, create)
        if fd is not None:
            if len(self._dirs) >= _MAX_OPEN:
                self._forget()  # the parent just used may go: it is not used again here
            self._dirs[rel_dir] = fd
        return fd

    def lookup(self, rel: str) -> Disk:
        head, _, name = rel.rpartition("/")
        try:
            parent = self.dir_fd(head)
        except Blocked as b:
            return b
        if parent is None:
            return None
        try:
            st = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            return None
        kind = _what(st)
        if kind == "symlink":
            target = os.readlink(os.fsencode(name), dir_fd=parent)
            return pygit2.hash(target), int(FileMode.LINK)
        if kind != "file":
            return kind
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            oid = blob_id(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        executable = st.st_mode & 0o100
        return oid, int(FileMode.BLOB_EXECUTABLE if executable else FileMode.BLOB)

    def is_empty(self) -> bool:
        return not os.listdir(self.fd)

    # -- the private temporary folder -------------------------------------------------------

    @staticmethod
    def private_name() -> str:
        return PRIVATE_PREFIX + secrets.token_hex(8)

    def make_private(self, name: str) -> int:
        """Make the fresh folder `name` (0700) and open it; an existing name is refused
        (mkdir never follows a symlink planted there)."""
        os.mkdir(name, 0o700, dir_fd=self.fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o700)  # whatever the umask took away
        if not _is_private(os.fstat(fd)):
            os.close(fd)
            raise PermissionError(f"{name} is not the private folder just made")
        return fd

    def open_private(self, name: str, ino: int | None = None) -> int | None:
        """The private folder `name`, only if it is still ours (a folder swapped in under
        that name is left alone: None)."""
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        st = os.fstat(fd)
        if not _is_private(st) or (ino is not None and st.st_ino != ino):
            os.close(fd)
            return None
        return fd

    def remove_private(self, name: str, ino: int | None = None) -> None:
        """Remove the private folder and what is left in it (only files and symlinks: it
        never holds a folder)."""
        fd = self.open_private(name, ino)
        if fd is None:
            return
        try:
            for entry in os.listdir(fd):
                os.unlink(entry, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=self.fd)

    # -- moves --------------------------------------------------------------------------

    def move_in(self, tmp_fd: int, tmp_name: str, rel: str) -> bool:
        """Rename `tmp_name` of the private folder to `rel`, making its parent folders.
        False when it was moved already (a retry)."""
        head, _, name = rel.rpartition("/")
        try:
            os.lstat(tmp_name, dir_fd=tmp_fd)
        except FileNotFoundError:
            return False
        parent = self.dir_fd(head, create=True)
        os.rename(tmp_name, name, src_dir_fd=tmp_fd, dst_dir_fd=parent)
        return True

    def move_out(self, rel: str, tmp_fd: int, tmp_name: str) -> bool:
        """Delete `rel` by renaming it into the private folder (removed with it at the end):
        only a file or a symlink, never a folder. False when it is gone already."""
        head, _, name = rel.rpartition("/")
        try:
            parent = self.dir_fd(head)
        except Blocked:
            return False
        if parent is None:
            return False
        try:
            if stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
                return False  # a folder made there since (a retry after a file became one)
        except FileNotFoundError:
            return False
        os.rename(name, tmp_name, src_dir_fd=parent, dst_dir_fd=tmp_fd)
        return True


def put_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Create `name` in the private folder: a symlink holding `data` as its target (written
    as is, never followed), or a file of that content."""
    if mode == FileMode.LINK:
        os.symlink(data, name, dir_fd=dir_fd)
        return
    fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644)
        os.fsync(fd)  # an export reported done survives a power cut (DESIGN "Durability")
    finally:
        os.close(fd)
