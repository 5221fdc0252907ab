"""The on-disk format of git's index file (Documentation/gitformat-index.txt): entries
encoded and parsed, for the writer in gitindex.py."""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
from collections.abc import Iterator

import pygit2

SIGNATURE = b"DIRC"
HEADER = struct.Struct(">4sII")
_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size
EXTENDED = 0x4000
SKIP_WORKTREE = 0x4000
_MASK = 0xFFFFFFFF


class IndexFormatError(ValueError):
    """An index file this writer does not keep (required extension, merge stages, bad data)."""


Stat = tuple[int, int, int, int, int, int, int, int, int]  # the 9 stat words before mode


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
        if not sig[:1].isupper():  # required ("link", "sdir"): not kept by this writer
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
        for c, piece in enumerate(self._joined):
            if piece is None:
                self._joined[c] = b"".join(self._blobs[c])
        return self._joined  # type: ignore[return-value]

    def joined(self) -> bytes:
        return b"".join(self.pieces())
