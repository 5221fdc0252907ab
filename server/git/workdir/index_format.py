"""The on-disk format of git's index file (Documentation/gitformat-index.txt): entries
encoded and parsed, for the writer in git/workdir/index_file.py."""

from __future__ import annotations

import bisect
import enum
import hashlib
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pygit2

log = logging.getLogger("braid.index")
SIGNATURE = b"DIRC"
HEADER = struct.Struct(">4sII")
_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size
EXTENDED = 0x4000
SPARSE_DIR_MODE = 0o040000  # a sparse directory entry: a whole tree, skip-worktree
SPARSE_EXTENSION = b"sdir"
_MASK = 0xFFFFFFFF


class Unknown(enum.Enum):
    """The type of UNKNOWN: a one-member enum, so a type checker narrows `is UNKNOWN`."""
    UNKNOWN = "unknown"


UNKNOWN: Final = Unknown.UNKNOWN  # GitIndex.tree_of a folder whose entries match no tree


class IndexLocked(RuntimeError):
    """`index.lock` is held by another writer (a git command running in the folder)."""


class IndexFormatError(ValueError):
    """An index file this writer does not keep (required extension, merge stages, bad data)."""


Stat = tuple[int, int, int, int, int, int, int, int, int]  # the 9 stat words before mode
# A folder's entries listed from a tree: (folder prefix ending in "/", raw tree id) ->
# sorted (key, encoded skip-worktree entry).
Expand = Callable[[bytes, bytes], list[tuple[bytes, bytes]]]


def stat_words(st: os.stat_result) -> Stat:
    return (int(st.st_ctime) & _MASK, st.st_ctime_ns % 1_000_000_000,
            int(st.st_mtime) & _MASK, st.st_mtime_ns % 1_000_000_000,
            st.st_dev & _MASK, st.st_ino & _MASK, st.st_uid & _MASK, st.st_gid & _MASK,
            st.st_size & _MASK)


NO_STAT: Stat = (0, 0, 0, 0, 0, 0, 0, 0, 0)


def encode(path: bytes, oid: bytes, mode: int, st: Stat, skip: bool) -> bytes:
    """One on-disk entry (v2/v3): stat words, mode, oid, flags, path, 1-8 NULs."""
    flags = min(len(path), 0xFFF) | (EXTENDED if skip else 0)
    head = _ENTRY.pack(st[0], st[1], st[2], st[3], st[4], st[5], mode, st[6], st[7], st[8],
                       oid, flags)
    if skip:
        head += b"\x40\x00"  # extended flags: skip-worktree
    size = (len(head) + len(path) + 8) & ~7
    return head + path + b"\0" * (size - len(head) - len(path))


def entry_oid(blob: bytes) -> bytes:
    return blob[40:60]


def entry_mode(blob: bytes) -> int:
    return int.from_bytes(blob[24:28], "big")


def entry_skips(blob: bytes) -> bool:
    return bool(blob[60] & 0x40) and bool(blob[62] & 0x40)


def entry_stat(blob: bytes) -> Stat:
    w = struct.unpack_from(">10I", blob)
    return (w[0], w[1], w[2], w[3], w[4], w[5], w[7], w[8], w[9])


def parse(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """(sorted paths, v2/v3 encoded entries) of an index file's bytes."""
    if len(data) < HEADER.size + 20 or hashlib.sha1(data[:-20]).digest() != data[-20:]:
        raise IndexFormatError("the index file is truncated or its checksum is wrong")
    sig, version, count = HEADER.unpack_from(data)
    if sig != SIGNATURE or version not in (2, 3, 4):
        raise IndexFormatError(f"not an index file this writer reads (version {version})")
    paths: list[bytes] = []
    blobs: list[bytes] = []
    off = HEADER.size
    prev = b""
    for _ in range(count):
        flags = int.from_bytes(data[off + 60:off + 62], "big")
        if flags & 0x3000:
            raise IndexFormatError("the index holds merge stages")
        start = off + 64 if flags & EXTENDED else off + 62
        if version == 4:
            strip, start = _varint(data, start)
            end = data.index(b"\0", start)
            path = prev[:len(prev) - strip] + data[start:end]
            skip = bool(flags & EXTENDED) and bool(data[off + 62] & 0x40)
            blob = encode(path, data[off + 40:off + 60], int.from_bytes(
                data[off + 24:off + 28], "big"), entry_stat(data[off:off + 40]), skip)
            off = end + 1
            prev = path
        else:
            end = data.index(b"\0", start)
            path = data[start:end]
            size = (end - off + 8) & ~7
            blob = data[off:off + size]
            off += size
        paths.append(path)
        blobs.append(blob)
    _check_extensions(data, off)
    return paths, blobs


def expand_sparse(keys: list[bytes], blobs: list[bytes], expand: Expand
                  ) -> tuple[list[bytes], list[bytes], dict[bytes, bytes | None]]:
    """Sparse directory entries replaced by the entries of their trees (`expand`); also
    folder prefix -> raw tree id of each."""
    made: list[tuple[bytes, bytes]] = []
    trees: dict[bytes, bytes | None] = {}  # GitIndex's: None is a folder known empty
    for key, blob in zip(keys, blobs, strict=True):
        if not key.endswith(b"/"):
            made.append((key, blob))
            continue
        if entry_mode(blob) != SPARSE_DIR_MODE:
            raise IndexFormatError(f"the index entry {key!r} is not a sparse directory")
        tree = trees[key] = entry_oid(blob)
        made += expand(key, tree)
    made.sort()
    return [k for k, _ in made], [b for _, b in made], trees


def _varint(data: bytes, off: int) -> tuple[int, int]:
    """Git's offset varint (index v4 path prefix lengths)."""
    byte = data[off]
    value = byte & 0x7F
    off += 1
    while byte & 0x80:
        byte = data[off]
        value = ((value + 1) << 7) | (byte & 0x7F)
        off += 1
    return value, off


def _check_extensions(data: bytes, off: int) -> None:
    end = len(data) - 20
    while off + 8 <= end:
        sig = data[off:off + 4]
        size = int.from_bytes(data[off + 4:off + 8], "big")
        # Required ("link"): not kept by this writer; "sdir" marks sparse directory
        # entries, which the reader's caller expands.
        if not sig[:1].isupper() and sig != SPARSE_EXTENSION:
            raise IndexFormatError(f"the index holds the required extension {sig!r}")
        off += 8 + size


def tree_entries(tree: pygit2.Tree, prefix: str = "", skip: tuple[str, ...] = ()
                 ) -> Iterator[tuple[str, pygit2.Oid, int, bool]]:
    """(path, oid, mode, skip-worktree) of every file of `tree`, for `GitIndex.reset`: the
    paths under a prefix in `skip` get skip-worktree."""
    for entry in tree:
        path = f"{prefix}{entry.name}"
        if isinstance(entry, pygit2.Tree):
            yield from tree_entries(entry, f"{path}/", skip)
        elif entry.filemode != pygit2.enums.FileMode.COMMIT:
            yield path, entry.id, int(entry.filemode), path.startswith(skip) if skip else False


class SortedEntries:
    """The entries (key → encoded bytes), sorted by key, in chunks of about `CHUNK` whose
    joined bytes are cached: a change re-joins one chunk, so writing 100,000 entries joins
    ~100 cached pieces instead of 100,000 small ones."""

    CHUNK = 1024

    def __init__(self, keys: list[bytes] | None = None, blobs: list[bytes] | None = None
                 ) -> None:
        keys, blobs = keys or [], blobs or []
        n = self.CHUNK
        self._keys = [keys[i:i + n] for i in range(0, len(keys), n)]
        self._blobs = [blobs[i:i + n] for i in range(0, len(blobs), n)]
        self._joined: list[bytes | None] = [None] * len(self._keys)
        self._firsts = [k[0] for k in self._keys]
        self._count = len(keys)

    def __len__(self) -> int:
        return self._count

    def _locate(self, key: bytes) -> tuple[int, int, bool]:
        if not self._keys:
            return -1, 0, False
        c = max(bisect.bisect_right(self._firsts, key) - 1, 0)
        keys = self._keys[c]
        i = bisect.bisect_left(keys, key)
        return c, i, i < len(keys) and keys[i] == key

    def find(self, key: bytes) -> bytes | None:
        c, i, found = self._locate(key)
        return self._blobs[c][i] if found else None

    def put(self, key: bytes, blob: bytes) -> bytes | None:
        """Insert or replace; returns the replaced bytes."""
        c, i, found = self._locate(key)
        if c < 0:  # the first entry
            self._keys, self._blobs, self._joined = [[key]], [[blob]], [None]
            self._firsts, self._count = [key], 1
            return None
        self._joined[c] = None
        if found:
            old, self._blobs[c][i] = self._blobs[c][i], blob
            return old
        self._keys[c].insert(i, key)
        self._blobs[c].insert(i, blob)
        self._firsts[c] = self._keys[c][0]
        self._count += 1
        if len(self._keys[c]) > 2 * self.CHUNK:  # split, so a chunk stays cheap to re-join
            half = len(self._keys[c]) // 2
            self._keys[c + 1:c + 1] = [self._keys[c][half:]]
            self._blobs[c + 1:c + 1] = [self._blobs[c][half:]]
            del self._keys[c][half:], self._blobs[c][half:]
            self._joined[c + 1:c + 1] = [None]
            self._firsts[c + 1:c + 1] = [self._keys[c + 1][0]]
        return None

    def remove(self, key: bytes) -> bytes | None:
        c, i, found = self._locate(key)
        if not found:
            return None
        old = self._blobs[c][i]
        del self._keys[c][i], self._blobs[c][i]
        self._count -= 1
        if self._keys[c]:
            self._joined[c] = None
            self._firsts[c] = self._keys[c][0]
        else:
            del self._keys[c], self._blobs[c], self._joined[c], self._firsts[c]
        return old

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(key, bytes) in order, those starting with `prefix` (found by bisection)."""
        start, i, _ = self._locate(prefix) if prefix else (0, 0, False)
        for c in range(max(start, 0), len(self._keys)):
            keys, blobs = self._keys[c], self._blobs[c]
            for j in range(i, len(keys)):
                if not keys[j].startswith(prefix):
                    return
                yield keys[j], blobs[j]
            i = 0

    def flat(self) -> tuple[list[bytes], list[bytes]]:
        keys: list[bytes] = []
        blobs: list[bytes] = []
        for k, b in zip(self._keys, self._blobs, strict=True):
            keys += k
            blobs += b
        return keys, blobs

    def copy(self) -> SortedEntries:
        other = SortedEntries()
        other._keys = [list(k) for k in self._keys]
        other._blobs = [list(b) for b in self._blobs]
        other._joined, other._firsts = list(self._joined), list(self._firsts)
        other._count = self._count
        return other

    def pieces(self) -> list[bytes]:
        """The entries' bytes in order, as one cached piece per chunk."""
        out: list[bytes] = []  # one item per chunk (~1,000 entries), not per entry
        for c, piece in enumerate(self._joined):
            if piece is None:
                piece = self._joined[c] = b"".join(self._blobs[c])
            out.append(piece)
        return out

    def pieces_except(self, sparse: list[tuple[bytes, bytes]]) -> tuple[list[bytes], int]:
        """The entries' bytes in order with the entries under each prefix of `sparse`
        ((prefix ending in "/", the one entry standing for them), sorted) replaced by that
        entry, and how many entries that is. A chunk wholly inside a prefix is skipped
        unread, so the cost follows the entries outside the prefixes."""
        out: list[bytes] = []
        count = 0
        ranges = [(p, prefix_end(p), blob) for p, blob in sparse]
        r = 0
        emitted = False
        for c, keys in enumerate(self._keys):
            lo, n = 0, len(keys)
            while lo < n:
                while r < len(ranges) and ranges[r][1] <= keys[lo]:
                    if not emitted:
                        out.append(ranges[r][2])
                        count += 1
                    r, emitted = r + 1, False
                if r < len(ranges) and keys[lo] >= ranges[r][0]:  # inside the range
                    if not emitted:
                        out.append(ranges[r][2])
                        count += 1
                        emitted = True
                    lo = bisect.bisect_left(keys, ranges[r][1], lo)
                    continue
                hi = n if r == len(ranges) else bisect.bisect_left(keys, ranges[r][0], lo)
                if lo == 0 and hi == n:
                    piece = self._joined[c]
                    if piece is None:
                        piece = self._joined[c] = b"".join(self._blobs[c])
                    out.append(piece)
                else:
                    out.append(b"".join(self._blobs[c][lo:hi]))
                count += hi - lo
                lo = hi
        for _, _, blob in ranges[r:]:
            if not emitted:
                out.append(blob)
                count += 1
            emitted = False
        return out, count


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with `prefix` (which ends in "/")."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def same_entry(a: bytes, b: bytes) -> bool:
    """The same path, blob, mode and skip-worktree bit (the stat data may differ)."""
    return entry_oid(a) == entry_oid(b) and entry_mode(a) == entry_mode(b) and \
        entry_skips(a) == entry_skips(b)


def write_pieces(fd: int, pieces: list[bytes]) -> None:
    for start in range(0, len(pieces), 512):  # IOV_MAX is 1024
        batch = pieces[start:start + 512]
        done = os.writev(fd, batch)
        if done < sum(len(p) for p in batch):  # a short write: the rest one by one
            rest = memoryview(b"".join(batch))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


# A lock file older than this process was left by a dead one: only Braid writes in a
# session's .git, and each of its writes holds a lock for milliseconds (recovery.py).
PROCESS_STARTED = time.time()


def clear_stale_lock(lock: Path, before: float | None = None) -> None:
    """Remove `lock` if it is older than this process (or than `before`)."""
    try:
        if lock.stat().st_mtime < (PROCESS_STARTED if before is None else before):
            lock.unlink()
            log.warning("removed stale lock %s", lock)
    except FileNotFoundError:
        pass


def open_lock(lock: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(20):
        try:
            return os.open(lock, flags, 0o644)
        except FileExistsError:
            time.sleep(0.01)  # a git command in the folder holds it for a moment
    raise IndexLocked(f"{lock} is held by another writer")
