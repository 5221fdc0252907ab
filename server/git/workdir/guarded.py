"""The one guarded writer: every write an operation makes inside a session folder (merge,
checkout, revert, fork, recovery, checkpoints) goes through here (DESIGN §4 "Atomic
operations").

A path is walked component by component with directory file descriptors opened
`O_NOFOLLOW`, so no symlinked parent is ever followed (a symlink swapped in between a check and
the write cannot redirect it either), and absolute, empty, `.` and `..` components are refused.
Files are written to a temporary name in their own folder and renamed over the target, so a
kill leaves either the old or the new content, never a half file. Temporary names match
`TEMP_GLOB`, which every session's `.git/info/exclude` lists: a temporary file never shows in
`git status` and never enters a commit; start-up recovery deletes the ones a kill left.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from server.base.errors import BadRequest, Conflict

TEMP_PREFIX = ".~braid-"
TEMP_SUFFIX = ".tmp"
TEMP_GLOB = f"{TEMP_PREFIX}*{TEMP_SUFFIX}"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Conflict):
    """A write that would leave its folder (a symlinked parent, a file in the way)."""


def is_temp(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


def parts_of(rel: object) -> list[str]:
    """The components of a relative path, refusing anything that could point elsewhere."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise BadRequest(f"invalid path {rel!r}")
    if rel.startswith("/") or rel.startswith("\\"):
        raise BadRequest(f"absolute path {rel!r} is not allowed")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise BadRequest(f"path {rel!r} must not hold empty, '.' or '..' parts")
    return parts


def _open_dir(fd: int, name: str, rel: str, create: bool) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            return None
        os.mkdir(name, 0o755, dir_fd=fd)
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            kind = "a symlink" if _is_link(fd, name) else "not a folder"
            raise UnsafePath(f"cannot write {rel}: {name} is {kind}",
                             {"conflicts": [], "path": rel}) from e
        raise


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode)
    except OSError:
        return False


def _parent_fd(root: Path, parts: list[str], rel: str, create: bool) -> int | None:
    """An open descriptor of the folder holding `parts[-1]` (None: it does not exist)."""
    fd = os.open(str(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in parts[:-1]:
        try:
            nxt = _open_dir(fd, name, rel, create)
        finally:
            os.close(fd)
        if nxt is None:
            return None
        fd = nxt
    return fd


def check(root: Path, rel: str, deleting: Iterable[str] = ()) -> None:
    """Raise unless `rel` can be written under `root` (after the paths in `deleting` are
    gone), without changing anything: call it for every path before the first write."""
    parts = parts_of(rel)
    gone = set(deleting)
    current = root
    for i, name in enumerate(parts[:-1]):
        current = current / name
        prefix = "/".join(parts[: i + 1])
        if prefix in gone:
            return  # deleted first: the writer makes a fresh folder
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"cannot write {rel}: {prefix} is a symlink",
                             {"conflicts": [], "path": rel})
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"cannot write {rel}: {prefix} is a file",
                             {"conflicts": [], "path": rel})


def left_out(root: Path, rel: str) -> bool:
    """Whether a file found on disk at `rel` must stay out of a commit: a killed writer's
    temporary file, or a file seen through a symlinked folder (not in this tree at all; it
    may be outside the session)."""
    if is_temp(rel.rsplit("/", 1)[-1]):
        return True
    try:
        check(root, rel)
    except (UnsafePath, BadRequest):
        return True
    return False


def write(root: Path, rel: str, data: bytes, *, executable: bool = False,
          symlink: bool = False) -> None:
    """Make `root/rel` hold `data` (a regular file, or a symlink whose target is `data`),
    creating its folders; a folder standing at `rel` itself is removed first."""
    parts = parts_of(rel)
    fd = _parent_fd(root, parts, rel, create=True)
    assert fd is not None
    name = parts[-1]
    tmp = f"{TEMP_PREFIX}{secrets.token_hex(6)}{TEMP_SUFFIX}"
    try:
        if symlink:
            os.symlink(data.decode("utf-8", "surrogateescape"), tmp, dir_fd=fd)
        else:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o755 if executable else 0o644, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fchmod(out, 0o755 if executable else 0o644)
            finally:
                os.close(out)
        _clear_folder(fd, name)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)


def sync(root: Path, rel: str) -> None:
    """fsync the regular file at `rel` (its data survives a power cut; its name needs
    `sync_folder` on its folder). Nothing there, or not a regular file: nothing to do.
    No symlink is followed, as for a write."""
    parts = parts_of(rel)
    try:
        fd = _parent_fd(root, parts, rel, create=False)
    except UnsafePath:  # a folder on the way is a symlink now: not ours to sync
        return
    if fd is None:
        return
    try:
        out = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                      dir_fd=fd)
    except OSError:  # gone, a symlink (ELOOP)...
        return
    finally:
        os.close(fd)
    try:
        if stat.S_ISREG(os.fstat(out).st_mode):
            os.fsync(out)
    finally:
        os.close(out)


def sync_folder(root: Path, rel: str) -> None:
    """fsync the folder `rel` ("": `root`), so the names made or removed in it survive a
    power cut. A folder gone meanwhile: nothing to do."""
    try:
        fd = _parent_fd(root, [*parts_of(rel), "-"], rel, create=False) if rel else \
            os.open(str(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except UnsafePath:  # a symlink now: not ours to sync
        return
    if fd is None:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def folders_of(rels: Iterable[str]) -> set[str]:
    """Every folder holding one of `rels`, up to the root (""): what a write may have
    made or renamed in, and so what to sync after it."""
    out: set[str] = set()
    for rel in rels:
        parts = rel.split("/")[:-1]
        for i in range(len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _clear_folder(fd: int, name: str) -> None:
    # A folder where a file must go: only an empty tree of folders may be replaced (callers
    # delete the files in it first), so nothing is destroyed by surprise. A file or a
    # symlink there is replaced by the rename itself.
    try:
        st = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        _remove_empty_tree(fd, name)


def _remove_empty_tree(fd: int, name: str) -> None:
    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    try:
        for child in os.listdir(sub):
            if not stat.S_ISDIR(os.lstat(child, dir_fd=sub).st_mode):
                raise UnsafePath(f"cannot replace the folder {name}: it still holds {child}",
                                 {"conflicts": []})
            _remove_empty_tree(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=fd)


def delete(root: Path, rel: str, *, prune_below: str | None = None) -> bool:
    """Remove the file or symlink `root/rel` (never following a symlinked parent); empty
    folders left behind are removed up to `prune_below` (a prefix of `rel`). Returns whether
    something was removed."""
    parts = parts_of(rel)
    try:
        fd = _parent_fd(root, parts, rel, create=False)
    except UnsafePath:
        return False  # it lies under a symlink or a file: it is not in this folder at all
    if fd is None:
        return False
    try:
        st = os.lstat(parts[-1], dir_fd=fd)
        if stat.S_ISDIR(st.st_mode):
            return False
        os.unlink(parts[-1], dir_fd=fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    if prune_below is not None:
        _prune(root, parts, len(parts_of(prune_below)))
    return True


def _prune(root: Path, parts: list[str], keep: int) -> None:
    # Git tracks no folders: a folder emptied by a restore or a merge would linger as clutter.
    for depth in range(len(parts) - 1, keep, -1):
        folder = root.joinpath(*parts[:depth])
        try:
            if folder.is_symlink() or any(folder.iterdir()):
                return
            folder.rmdir()
        except OSError:
            return


def remove_temp_files(root: Path, folders: Iterable[str]) -> list[str]:
    """Delete the temporary files a killed writer left under `root/folder` (no symlink is
    followed). Returns what was removed, relative to `root`."""
    removed = []
    for folder in folders:
        legacy = folder.split("/")[0] in ("history", "runs")  # never a user's file there
        base = root / folder
        if base.is_symlink() or not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                if is_temp(name) or (legacy and _legacy_temp(name)):
                    path = Path(dirpath) / name
                    path.unlink()
                    removed.append(path.relative_to(root).as_posix())
    return removed


def _legacy_temp(name: str) -> bool:
    # Earlier versions wrote `.<name>.tmp` (checkpoints) and `.<name>.braid-tmp` (restores).
    return name.startswith(".") and (name.endswith(".json.tmp") or name.endswith(".braid-tmp"))
