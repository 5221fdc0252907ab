"""Renames that cost what they say: Linux `renameat2` flags, with the plain calls when the
system or the file system lacks them.

- `rename_new(src, dst)`: rename unless `dst` exists (RENAME_NOREPLACE), one call where git's
  `link` + `unlink` (or a look first, then a rename) are two: how a loose object gets its name.
- `replace(src, dst)`: atomically put `src` in `dst`'s place. A plain `rename` over an
  existing file makes ext4 (auto_da_alloc) write the new file's data out before it returns,
  up to milliseconds on a busy disk; swapping the two names (RENAME_EXCHANGE) and unlinking
  the old file is atomic too (a reader sees the old or the new file, a kill -9 in between
  leaves the old content under `src`'s name, a lock file recovery removes) and leaves the data
  to the usual writeback. What must survive a power cut is synced by its caller first
  (`sync_dir`, `sync_all`: DESIGN "Durability").
- `sync_dir(path)`: fsync a folder, so the names made or renamed in it survive a power cut
  (a file's own fsync keeps its data, not its name).
- `sync_tree(path, pool)`: a folder just made whole (a new session, an import, a fork):
  every file and folder in it, then its own name.
- `sync_all(calls)`: run a batch of syncs all at once, each on its own thread (`SYNCERS`):
  the file system folds syncs that wait together into one journal commit, so a dozen cost
  about one. Only when every sync of the batch waits at once: a dozen on 4 threads cost 3-4
  commits in a row (on this VM's disk, 12 fsyncs: 34 ms one after another, 9 ms on 4
  threads, 1 ms on 16).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Executor
from pathlib import Path

from server.base.pools import IdlingThreadPool

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)

_renameat2: Callable[..., int] | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _fn = _libc.renameat2
    _fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _fn.restype = ctypes.c_int
    _renameat2 = _fn
except (OSError, AttributeError):  # not glibc 2.28+: the plain calls
    _renameat2 = None
_works = {_RENAME_NOREPLACE: _renameat2 is not None, _RENAME_EXCHANGE: _renameat2 is not None}


def _call(src: Path | str | bytes, dst: Path | str | bytes, flag: int) -> int:
    """0 when done, else the errno (an unsupported flag is remembered and reported EINVAL)."""
    if not _works[flag]:
        return errno.EINVAL
    assert _renameat2 is not None
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flag) == 0:
        return 0
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        _works[flag] = False
        return errno.EINVAL
    return err


def rename_new(src: Path | str | bytes, dst: Path | str | bytes) -> bool:
    """Rename `src` to `dst` unless `dst` exists (then False, `src` left in place)."""
    err = _call(src, dst, _RENAME_NOREPLACE)
    if err == 0:
        return True
    if err == errno.EEXIST:
        return False
    if err != errno.EINVAL:
        raise OSError(err, os.strerror(err), os.fsdecode(src), None, os.fsdecode(dst))
    try:  # as git does it
        os.link(src, dst)
    except FileExistsError:
        return False
    os.unlink(src)
    return True


def replace(src: Path | str | bytes, dst: Path | str | bytes) -> None:
    """Put `src` in `dst`'s place atomically, without waiting for its data to be written."""
    err = _call(src, dst, _RENAME_EXCHANGE)
    if err == 0:
        os.unlink(src)  # now the old file
        return
    if err not in (errno.EINVAL, errno.ENOENT):  # ENOENT: no `dst` yet, a plain rename
        raise OSError(err, os.strerror(err), os.fsdecode(src), None, os.fsdecode(dst))
    os.replace(src, dst)


def sync_dir(path: Path | str | bytes) -> None:
    """fsync the folder `path`: its entries (a create, a rename, an unlink) survive a cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The threads a batch of syncs waits on, one a sync (and one in the caller): a checkpoint's
# batch is its objects, its working-tree files and their folders, a few dozen at most. A
# thread spends its life waiting on the disk; they go after 5 s idle.
SYNC_THREADS = 47
SYNCERS = IdlingThreadPool(SYNC_THREADS, 5.0, name="braid-syncs")


def sync_dirs(paths: Iterable[Path | str | bytes], pool: Executor | None = SYNCERS) -> None:
    """`sync_dir` on each (once), together on `pool`."""
    sync_all([functools.partial(sync_dir, p) for p in dict.fromkeys(paths)], pool)


def sync_all(calls: Sequence[Callable[[], None]], pool: Executor | None = SYNCERS) -> None:
    """Run `calls` (syncs) at once: each but the first on `pool` (a thread each while it has
    them), the first here, all waited for; the first error is raised after the others are
    done. `pool=None`: one after another, here."""
    if pool is None or len(calls) < 2:
        for call in calls:
            call()
        return
    futures = [pool.submit(call) for call in calls[1:]]
    error: BaseException | None = None
    try:
        calls[0]()
    except BaseException as e:  # noqa: BLE001 - raised after the others are done
        error = e
    for future in futures:
        try:
            future.result()
        except BaseException as e:  # noqa: BLE001
            error = error or e
    if error is not None:
        raise error


def sync_file(path: Path | str | bytes) -> None:
    """fsync the file `path` (not following a symlink: a link's own entry is its folder's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # gone, or a symlink (ELOOP)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(path: Path, pool: Executor | None = SYNCERS,
              durable: Collection[str] = frozenset()) -> None:
    """Everything under `path` (files, then folders), then the folder holding it: a name
    that survives a power cut holds its whole data, and the folder's own name comes last, so
    a cut before then leaves no folder (a fork's start-up check reads too little of a
    repository to tell a missing pack from a whole one). The files named in `durable` (a
    fork's objects, hard links to files synced when they were written) have only their
    names synced, with their folders."""
    files: list[Callable[[], None]] = []
    folders: list[Callable[[], None]] = []
    for top, dirs, names in os.walk(path):
        folders.append(functools.partial(sync_dir, top))
        files += [functools.partial(sync_file, full) for n in names
                  if (full := os.path.join(top, n)) not in durable]
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    sync_all(files, pool)
    sync_all(folders, pool)
    sync_dir(path.parent)
