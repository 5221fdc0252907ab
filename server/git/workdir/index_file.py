"""The session's git index file (`.git/index`), owned by Braid (DESIGN "The index").

libgit2 rewrites the whole index on every write and cannot set skip-worktree bits, so Braid
keeps the entries in memory with the open session and writes the file itself: a change
costs O(changed entries) in memory, and a write is one join of the entries' cached bytes,
one SHA-1 and one write, atomic the way git does it (`index.lock` created `O_EXCL`, then
renamed over `index`).

The file written is index version 2, or 3 when an entry carries skip-worktree (the
`history/` and `runs/` entries, whose files are not on disk). A folder whose entries are
known to be exactly a tree's (`tree_of`: set by whoever moved them, `adopt` after a check)
is written as one sparse directory entry (git's sparse index: the tree's id, mode 040000,
skip-worktree, and the `sdir` extension), so a write costs the entries outside those
folders, not the history's; git reads it and expands it (no sparse-checkout config needed),
and the reader here expands it through `expand` (the folder's entries listed from the
tree). No other extension is written (git rebuilds its optional caches itself); a file
holding another required extension (a split index) or merge stages is refused with
`IndexFormatError`, and the caller rebuilds the index from HEAD. Versions 2, 3 and 4 are
read. libgit2 does not read a sparse index: `write(full=True)` before it has to.

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

from server.git.workdir.index_format import (
    HEADER,
    NO_STAT,
    SIGNATURE,
    SPARSE_DIR_MODE,
    SPARSE_EXTENSION,
    UNKNOWN,
    Expand,
    IndexFormatError,
    SortedEntries,
    Stat,
    Unknown,
    encode,
    entry_mode,
    entry_oid,
    entry_skips,
    entry_stat,
    expand_sparse,
    open_lock,
    parse,
    prefix_end,
    same_entry,
    stat_words,
    write_pieces,
)

__all__ = ["GitIndex"]
RACY_SECONDS = 2.0
_UNSMUDGE_PER_WRITE = 64
# A change for `GitIndex.update`: (oid, mode, lstat or None, skip-worktree, when taken).
Change = tuple[pygit2.Oid, int, "os.stat_result | None", bool, "float | None"]



class GitIndex:
    """The entries of one index file, sorted as git sorts them, with their encoded bytes."""

    def __init__(self, file: Path, root: Path, *, read: bool = True,
                 expand: Expand | None = None) -> None:
        self.file = Path(file)
        self.root = Path(root)  # the working tree the paths are relative to
        self._entries = SortedEntries()
        self._skips = 0
        self._expand = expand
        # Folder prefix -> the raw id of the tree its entries are exactly (None: no entry
        # under it, no tree); written as one sparse directory entry.
        self._trees: dict[bytes, bytes | None] = {}
        self.sparse_on_disk = False  # the file holds sparse directory entries
        # The entries outside the folders known as trees are a commit's (checked by the
        # caller, or a sparse file this writer wrote): git computes a cache-tree when it
        # expands a sparse index, and `git fsck` wants its trees to exist.
        self.committed = False
        self.loads = 0  # how many times the file was read
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
        keys, blobs = parse(data) if data else ([], [])
        self._trees = {}
        self.sparse_on_disk = False
        if any(k.endswith(b"/") for k in keys):  # sparse directory entries
            if self._expand is None:
                raise IndexFormatError("the index holds sparse directory entries")
            keys, blobs, self._trees = expand_sparse(keys, blobs, self._expand)
            self.sparse_on_disk = True
        self._set_all(keys, blobs)
        self._racy = {}
        self._stamp = stamp
        self.committed = self.sparse_on_disk  # written by git: checked again
        self.loads += 1

    def _set_all(self, keys: list[bytes], blobs: list[bytes]) -> None:
        self._entries = SortedEntries(keys, blobs)
        self._skips = sum(1 for b in blobs if entry_skips(b))

    def refresh(self) -> bool:
        """Re-read the file if something else (a git command) wrote it since; True if so."""
        if self._file_stamp() == self._stamp:
            return False
        self.load()
        return True

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: str) -> bool:
        return self._entries.find(_key(path)) is not None

    def get(self, path: str) -> tuple[pygit2.Oid, int, bool] | None:
        """(blob id, mode, skip-worktree) of `path`, or None."""
        blob = self._entries.find(_key(path))
        if blob is None:
            return None
        return pygit2.Oid(raw=entry_oid(blob)), entry_mode(blob), entry_skips(blob)

    def paths(self, prefix: str = "") -> Iterator[str]:
        """The paths starting with `prefix`, in order (a bisected range, not a scan)."""
        for key, _ in self._entries.items(_key(prefix)):
            yield key.decode("utf-8", "surrogateescape")

    def items(self) -> Iterator[tuple[str, int, bool]]:
        """(path, mode, skip-worktree) of every entry, in order."""
        for key, blob in self._entries.items():
            yield key.decode("utf-8", "surrogateescape"), entry_mode(blob), entry_skips(blob)

    def on_disk(self, off: tuple[str, ...] = ()) -> Iterator[tuple[str, pygit2.Oid, int, Stat]]:
        """(path, oid, mode, stat words) of every entry that is not skip-worktree. The
        entries under the folders `off` (skip-worktree whole: history/, runs/) are jumped
        over, not looked at: they are most of a long session's index (issue 30)."""
        keys, blobs = self._entries.flat()
        spans = sorted((bisect.bisect_left(keys, k), bisect.bisect_left(keys, prefix_end(k)))
                       for k in map(_key, off))
        start = 0
        for lo, hi in [*spans, (len(keys), len(keys))]:
            for j in range(start, lo):
                blob = blobs[j]
                if not entry_skips(blob):
                    yield (keys[j].decode("utf-8", "surrogateescape"),
                           pygit2.Oid(raw=entry_oid(blob)), entry_mode(blob), entry_stat(blob))
            start = max(start, hi)

    def copy(self, file: Path, root: Path) -> GitIndex:
        """The same entries for another index file (a fork's), without reading any file."""
        other = GitIndex(file, root, read=False, expand=self._expand)
        other._entries, other._skips = self._entries.copy(), self._skips
        other._trees = dict(self._trees)
        other.committed = self.committed
        return other

    def outside(self, prefixes: tuple[str, ...]) -> dict[str, tuple[bytes, int]]:
        """path -> (raw blob id, mode) of every entry not under `prefixes`."""
        skip = tuple(_key(p) for p in prefixes)
        return {key.decode("utf-8", "surrogateescape"): (entry_oid(blob), entry_mode(blob))
                for key, blob in self._entries.items() if not key.startswith(skip)}

    # -- folders that are one tree ----------------------------------------------------------

    def tree_of(self, prefix: str) -> bytes | Unknown | None:
        """The raw id of the tree the entries under `prefix` (ending in "/") are known to
        be (None: no entries, no tree), or UNKNOWN."""
        return self._trees.get(_key(prefix), UNKNOWN)

    def adopt(self, prefix: str, tree: bytes | None, items: list[tuple[bytes, bytes]]) -> bool:
        """Know the entries under `prefix` as `tree` if they are `items` (its listing):
        compared, so a wrong guess costs a full write, never a wrong index."""
        keys, blobs = self._entries.flat()
        start = _key(prefix)
        lo = bisect.bisect_left(keys, start)
        hi = bisect.bisect_left(keys, prefix_end(start), lo)
        same = keys[lo:hi] == [k for k, _ in items] and (
            blobs[lo:hi] == [b for _, b in items] or all(
                same_entry(a, b) for a, (_, b) in zip(blobs[lo:hi], items, strict=True)))
        if same:
            self._trees[start] = tree
        return same

    def _touch(self, key: bytes) -> None:
        """An entry under a folder known as a tree changed: the folder is known no more."""
        for prefix in self._trees:
            if key.startswith(prefix):
                del self._trees[prefix]
                return

    # -- changing -------------------------------------------------------------------------

    def set(self, path: str, oid: pygit2.Oid, mode: int, st: os.stat_result | None = None,
            *, skip: bool = False, taken: float | None = None) -> None:
        """Add or replace the entry of `path`. `st`: the file's lstat, taken before its
        content was read or right after it was written (None: no stat data, git rehashes;
        a skip-worktree entry needs none). `taken`: when `st` was taken (default now)."""
        self._put(*self._encoded(path, oid, mode, st, skip, taken))

    def _encoded(self, path: str, oid: pygit2.Oid, mode: int, st: os.stat_result | None,
                 skip: bool, taken: float | None) -> tuple[bytes, bytes]:
        key = _key(path)
        words = stat_words(st) if st is not None and not skip else NO_STAT
        self._racy.pop(key, None)
        if st is not None and not skip:
            taken = time.time() if taken is None else taken
            if st.st_mtime >= taken - RACY_SECONDS:
                self._racy[key] = (words, taken)
                words = (*words[:8], 0)
        return key, encode(key, oid.raw, mode, words, skip)

    def _put(self, key: bytes, blob: bytes) -> None:
        if self._trees:
            self._touch(key)
        old = self._entries.put(key, blob)
        self._skips += entry_skips(blob) - (entry_skips(old) if old is not None else 0)

    def remove(self, path: str) -> None:
        self._remove(_key(path))

    def _remove(self, key: bytes) -> None:
        if self._trees:
            self._touch(key)
        old = self._entries.remove(key)
        if old is not None:
            self._skips -= entry_skips(old)
        self._racy.pop(key, None)

    def update(self, changes: Iterable[tuple[str, Change | None]],
               trees: dict[str, tuple[bytes | None, bytes | None]] | None = None) -> None:
        """Many changes at once, (path, (oid, mode, st, skip, taken)) or (path, None) to
        remove: past a few dozen, one merge of the sorted lists, not an insert each.
        `trees`: folder prefix -> (tree before, tree after) the changes under it make; a
        folder known as the first is known as the second after them."""
        moved = {_key(p): after for p, (before, after) in (trees or {}).items()
                 if self._trees.get(_key(p), UNKNOWN) == before}
        self._update(changes)
        self._trees.update(moved)

    def _update(self, changes: Iterable[tuple[str, Change | None]]) -> None:
        made: dict[bytes, bytes | None] = {}
        for path, change in changes:
            if change is None:
                made[_key(path)] = None
            else:
                key, encoded = self._encoded(path, *change)
                made[key] = encoded
        if len(made) < 64:
            for key, blob in made.items():
                if blob is None:
                    self._remove(key)
                else:
                    self._put(key, blob)
            return
        for key in [k for k, b in made.items() if b is None]:
            self._racy.pop(key, None)
        for key in made:
            if not self._trees:
                break
            self._touch(key)
        paths, blobs = self._entries.flat()
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
        self._set_all(new_paths, new_blobs)

    def replace_prefix(self, prefix: str, items: list[tuple[bytes, bytes]],
                       tree: bytes | Unknown | None = UNKNOWN) -> None:
        """Every entry under `prefix` (ending in "/") replaced by `items` (key, encoded
        bytes), sorted: one splice of the sorted lists. `tree`: the raw id of the tree
        `items` list (None: no tree), if known."""
        keys, blobs = self._entries.flat()
        start = _key(prefix)
        self._trees.pop(start, None)
        if tree is not UNKNOWN:
            self._trees[start] = tree
        lo = bisect.bisect_left(keys, start)
        hi = bisect.bisect_left(keys, prefix_end(start), lo)
        for key in keys[lo:hi]:
            self._racy.pop(key, None)
        keys[lo:hi] = [k for k, _ in items]
        blobs[lo:hi] = [b for _, b in items]
        self._set_all(keys, blobs)

    def reset(self, entries: Iterable[tuple[str, pygit2.Oid, int, bool]],
              trees: dict[str, bytes | None] | None = None) -> None:
        """Replace every entry by `entries` (path, oid, mode, skip), as `git read-tree`
        does: an entry whose path, oid and mode are unchanged keeps its stat data.
        `trees`: folder prefix -> the raw id of the tree its entries are (None: none)."""
        self._trees = {_key(p): t for p, t in (trees or {}).items()}
        old = dict(self._entries.items())
        made: list[tuple[bytes, bytes]] = []
        for path, oid, mode, skip in entries:
            key = _key(path)
            prev = old.get(key)
            if prev is not None and not skip and not entry_skips(prev) and \
                    entry_oid(prev) == oid.raw and entry_mode(prev) == mode:
                made.append((key, prev))
            else:
                made.append((key, encode(key, oid.raw, mode, NO_STAT, skip)))
        made.sort()
        self._set_all([k for k, _ in made], [b for _, b in made])
        self._racy = {k: v for k, v in self._racy.items() if k in old}

    # -- writing --------------------------------------------------------------------------

    def write(self, *, full: bool = False) -> None:
        """Write the file atomically: `index.lock` (O_EXCL), then rename over `index`. The
        folders known as trees are one sparse directory entry each, unless `full`."""
        self._unsmudge()
        version = 3 if self._skips else 2
        sparse = [] if full or not self.committed else sorted(
            (prefix, encode(prefix, tree, SPARSE_DIR_MODE, NO_STAT, True))
            for prefix, tree in self._trees.items() if tree is not None)
        # The cached pieces are hashed and written as they are: no 10 MB copy per write.
        if sparse:
            body, count = self._entries.pieces_except(sparse)
            body.append(SPARSE_EXTENSION + b"\0\0\0\0")
        else:
            body, count = self._entries.pieces(), len(self._entries)
        pieces = [HEADER.pack(SIGNATURE, version, count), *body]
        digest = hashlib.sha1()
        for piece in pieces:
            digest.update(piece)
        pieces.append(digest.digest())
        lock = self.file.with_name(self.file.name + ".lock")
        fd = open_lock(lock)
        try:
            write_pieces(fd, pieces)
        except BaseException:
            os.close(fd)
            lock.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(lock, self.file)
        self._stamp = self._file_stamp()
        self.sparse_on_disk = bool(sparse)

    def _unsmudge(self) -> None:
        """Entries smudged for racy git get their real stat data back once they are older
        than the racy window and their content still matches (checked by hashing)."""
        if not self._racy:
            return
        now = time.time()
        ripe = [k for k, (_, taken) in self._racy.items() if now - taken >= RACY_SECONDS]
        for key in ripe[:_UNSMUDGE_PER_WRITE]:
            words, _ = self._racy.pop(key)
            blob = self._entries.find(key)
            if blob is None:
                continue
            path = self.root / key.decode("utf-8", "surrogateescape")
            try:
                same = stat_words(os.lstat(path)) == words and \
                    pygit2.hashfile(str(path)).raw == entry_oid(blob)
            except (OSError, ValueError):
                same = False
            if same:
                self._entries.put(key, encode(key, entry_oid(blob), entry_mode(blob), words,
                                              False))


def _key(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")
