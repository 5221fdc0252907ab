"""The session's git index file (`.git/index`), owned by Braid (DESIGN "The index").

libgit2 rewrites the whole index on every write and cannot set skip-worktree bits, so Braid
keeps the entries in memory with the open session and writes the file itself: a change
costs O(changed entries) in memory, and a write is one join of the entries' cached bytes,
one SHA-1 and one write, atomic the way git does it (`index.lock` created `O_EXCL`, then
renamed over `index`).

The file written is index version 2, or 3 when an entry carries skip-worktree (the
`history/` and `runs/` entries, whose files are not on disk). Extensions are not written
(git rebuilds its optional caches itself); a file holding a required extension (a split or
sparse index) or merge stages is refused with `IndexFormatError`, and the caller rebuilds
the index from HEAD. Versions 2, 3 and 4 are read.

Stat data is real for files on disk, so `git status` compares them by lstat. Racy git: a
file modified in the same clock tick as the lstat that recorded it would look unchanged, so
an entry whose mtime is within `RACY_SECONDS` of its lstat is written with size 0 (git's
"smudge": git then compares its content) and unsmudged by a later write once it is older
and its content is checked again.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pygit2

from .indexformat import (
    HEADER,
    NO_STAT,
    SIGNATURE,
    IndexFormatError,
    Stat,
    encode,
    entry_mode,
    entry_oid,
    entry_skips,
    parse,
    stat_words,
    tree_entries,
)

__all__ = ["GitIndex", "IndexFormatError", "IndexLocked", "tree_entries"]
RACY_SECONDS = 2.0
_UNSMUDGE_PER_WRITE = 64
_LOCK_TRIES = 20
# A change for `GitIndex.update`: (oid, mode, lstat or None, skip-worktree, when taken).
Change = tuple[pygit2.Oid, int, "os.stat_result | None", bool, "float | None"]


class IndexLocked(RuntimeError):
    """`index.lock` is held by another writer (a git command running in the folder)."""


class GitIndex:
    """The entries of one index file, sorted as git sorts them, with their encoded bytes."""

    def __init__(self, file: Path, root: Path, *, read: bool = True) -> None:
        self.file = Path(file)
        self.root = Path(root)  # the working tree the paths are relative to
        self._paths: list[bytes] = []
        self._blobs: list[bytes] = []
        self._skips = 0
        # Smudged entries (size 0 on disk): path -> (real stat, when it was taken).
        self._racy: dict[bytes, tuple[Stat, float]] = {}
        self._stamp: tuple[int, int, int, int] | None = None
        if read:
            self.load()

    # -- reading ------------------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.file)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def load(self) -> None:
        """Read the file (a missing file is an empty index)."""
        stamp = self._file_stamp()
        try:
            data = self.file.read_bytes()
        except FileNotFoundError:
            data = b""
        self._paths, self._blobs = parse(data) if data else ([], [])
        self._skips = sum(1 for b in self._blobs if entry_skips(b))
        self._racy = {}
        self._stamp = stamp

    def refresh(self) -> bool:
        """Re-read the file if something else (a git command) wrote it since; True if so."""
        if self._file_stamp() == self._stamp:
            return False
        self.load()
        return True

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, path: str) -> bool:
        return self._find(path.encode("utf-8", "surrogateescape")) is not None

    def _find(self, key: bytes) -> int | None:
        i = bisect.bisect_left(self._paths, key)
        return i if i < len(self._paths) and self._paths[i] == key else None

    def get(self, path: str) -> tuple[pygit2.Oid, int, bool] | None:
        """(blob id, mode, skip-worktree) of `path`, or None."""
        i = self._find(path.encode("utf-8", "surrogateescape"))
        if i is None:
            return None
        blob = self._blobs[i]
        return pygit2.Oid(raw=entry_oid(blob)), entry_mode(blob), entry_skips(blob)

    def paths(self, prefix: str = "") -> Iterator[str]:
        """The paths starting with `prefix`, in order (a bisected range, not a scan)."""
        key = prefix.encode("utf-8", "surrogateescape")
        i = bisect.bisect_left(self._paths, key)
        while i < len(self._paths) and self._paths[i].startswith(key):
            yield self._paths[i].decode("utf-8", "surrogateescape")
            i += 1

    def items(self) -> Iterator[tuple[str, int, bool]]:
        """(path, mode, skip-worktree) of every entry, in order."""
        for key, blob in zip(self._paths, self._blobs, strict=True):
            yield key.decode("utf-8", "surrogateescape"), entry_mode(blob), entry_skips(blob)

    # -- changing -------------------------------------------------------------------------

    def set(self, path: str, oid: pygit2.Oid, mode: int, st: os.stat_result | None = None,
            *, skip: bool = False, taken: float | None = None) -> None:
        """Add or replace the entry of `path`. `st`: the file's lstat, taken before its
        content was read or right after it was written (None: no stat data, git rehashes;
        a skip-worktree entry needs none). `taken`: when `st` was taken (default now)."""
        key, blob = self._encoded(path, oid, mode, st, skip, taken)
        self._put(key, blob)

    def _encoded(self, path: str, oid: pygit2.Oid, mode: int, st: os.stat_result | None,
                 skip: bool, taken: float | None) -> tuple[bytes, bytes]:
        key = path.encode("utf-8", "surrogateescape")
        words = stat_words(st) if st is not None and not skip else NO_STAT
        self._racy.pop(key, None)
        if st is not None and not skip:
            taken = time.time() if taken is None else taken
            if st.st_mtime >= taken - RACY_SECONDS:
                self._racy[key] = (words, taken)
                words = (*words[:8], 0)
        return key, encode(key, oid.raw, mode, words, skip)

    def update(self, changes: Iterable[tuple[str, Change | None]]) -> None:
        """Many changes at once, (path, (oid, mode, st, skip, taken)) or (path, None) to
        remove: one merge of the sorted lists, O(entries + changes), not an insert each."""
        made: dict[bytes, bytes | None] = {}
        for path, change in changes:
            if change is None:
                key = path.encode("utf-8", "surrogateescape")
                self._racy.pop(key, None)
                made[key] = None
            else:
                key, blob = self._encoded(path, *change)
                made[key] = blob
        if len(made) < 64:
            for key, blob in made.items():
                if blob is None:
                    self.remove(key.decode("utf-8", "surrogateescape"))
                else:
                    self._put(key, blob)
            return
        self._merge(made)

    def _merge(self, made: dict[bytes, bytes | None]) -> None:
        paths, blobs = self._paths, self._blobs
        new_paths: list[bytes] = []
        new_blobs: list[bytes] = []
        i = 0
        for key in sorted(made):
            j = bisect.bisect_left(paths, key, i)
            new_paths += paths[i:j]
            new_blobs += blobs[i:j]
            if j < len(paths) and paths[j] == key:
                j += 1  # replaced or removed
            blob = made[key]
            if blob is not None:
                new_paths.append(key)
                new_blobs.append(blob)
            i = j
        new_paths += paths[i:]
        new_blobs += blobs[i:]
        self._paths, self._blobs = new_paths, new_blobs
        self._skips = sum(1 for b in new_blobs if b[60] & 0x40 and b[62] & 0x40)

    def _put(self, key: bytes, blob: bytes) -> None:
        i = bisect.bisect_left(self._paths, key)
        if i < len(self._paths) and self._paths[i] == key:
            self._skips -= entry_skips(self._blobs[i])
            self._blobs[i] = blob
        else:
            self._paths.insert(i, key)
            self._blobs.insert(i, blob)
        self._skips += entry_skips(blob)

    def remove(self, path: str) -> None:
        key = path.encode("utf-8", "surrogateescape")
        i = self._find(key)
        if i is not None:
            self._skips -= entry_skips(self._blobs[i])
            del self._paths[i], self._blobs[i]
        self._racy.pop(key, None)

    def set_skip(self, path: str, skip: bool = True) -> None:
        """Turn skip-worktree on or off for an existing entry (its stat data dropped)."""
        got = self.get(path)
        if got is not None and got[2] != skip:
            self.set(path, got[0], got[1], skip=skip)

    def reset(self, entries: Iterable[tuple[str, pygit2.Oid, int, bool]]) -> None:
        """Replace every entry by `entries` (path, oid, mode, skip), as `git read-tree`
        does: an entry whose path, oid and mode are unchanged keeps its stat data."""
        old = dict(zip(self._paths, self._blobs, strict=True))
        made: list[tuple[bytes, bytes]] = []
        for path, oid, mode, skip in entries:
            key = path.encode("utf-8", "surrogateescape")
            prev = old.get(key)
            if prev is not None and not skip and not entry_skips(prev) and \
                    entry_oid(prev) == oid.raw and entry_mode(prev) == mode:
                made.append((key, prev))
            else:
                made.append((key, encode(key, oid.raw, mode, NO_STAT, skip)))
        made.sort()
        self._paths = [k for k, _ in made]
        self._blobs = [b for _, b in made]
        self._skips = sum(1 for b in self._blobs if entry_skips(b))
        self._racy = {k: v for k, v in self._racy.items() if k in old}

    # -- writing --------------------------------------------------------------------------

    def write(self) -> None:
        """Write the file atomically: `index.lock` (O_EXCL), then rename over `index`."""
        self._unsmudge()
        version = 3 if self._skips else 2
        body = HEADER.pack(SIGNATURE, version, len(self._blobs)) + b"".join(self._blobs)
        data = body + hashlib.sha1(body).digest()
        lock = self.file.with_name(self.file.name + ".lock")
        fd = _open_lock(lock)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            lock.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(lock, self.file)
        self._stamp = self._file_stamp()

    def _unsmudge(self) -> None:
        """Entries smudged for racy git get their real stat data back once they are older
        than the racy window and their content still matches (checked by hashing)."""
        if not self._racy:
            return
        now = time.time()
        done = 0
        for key, (words, taken) in list(self._racy.items()):
            if done >= _UNSMUDGE_PER_WRITE:
                break
            if now - taken < RACY_SECONDS:
                continue
            done += 1
            del self._racy[key]
            i = self._find(key)
            if i is None:
                continue
            blob = self._blobs[i]
            path = self.root / key.decode("utf-8", "surrogateescape")
            try:
                st = os.lstat(path)
                same = stat_words(st) == words and \
                    pygit2.hashfile(str(path)).raw == entry_oid(blob)
            except (OSError, ValueError):
                same = False
            if same:
                self._blobs[i] = encode(key, entry_oid(blob), entry_mode(blob), words, False)


def _open_lock(lock: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(_LOCK_TRIES):
        try:
            return os.open(lock, flags, 0o644)
        except FileExistsError:
            time.sleep(0.01)  # a git command in the folder holds it for a moment
    raise IndexLocked(f"{lock} is held by another writer")


