"""Write many new blobs as one pack file (with its v2 index) instead of one loose object
file each: an import of 100,000 files then costs one file write for its objects, where
`git add -A` (and pygit2's `create_blob`) create, compress and rename 100,000 files.

The format is git's (Documentation/gitformat-pack.txt): "PACK", version 2, the object count,
each object as a type+size header and its zlib-deflated bytes, a SHA-1 trailer; the index
holds the fan-out table, sorted ids, CRC-32s and offsets. The pack is written under a
temporary name and renamed with its index, so a crash leaves no pack git would read."""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from pathlib import Path

import pygit2

from server.base.fsops import sync_dir
from server.git.objects import common_dir

BLOB = 3


def _header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


class PackWriter:
    """`add(data)` → the blob's id; `close()` makes the objects readable by the repo."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.pack_dir = common_dir(repo) / "objects" / "pack"  # a worktree's too
        self.pack_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="tmp_pack_", dir=self.pack_dir)
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self._entries: dict[bytes, tuple[int, int]] = {}  # raw id → (offset, crc32)
        self._offset = 12
        self._write(b"PACK" + struct.pack(">II", 2, 0))  # the count is patched at close

    def _write(self, data: bytes) -> None:
        self._file.write(data)

    def add(self, data: bytes) -> pygit2.Oid:
        oid = pygit2.hash(data)
        raw = oid.raw
        if raw in self._entries:
            return oid
        record = _header(BLOB, len(data)) + zlib.compress(data, 1)
        self._entries[raw] = (self._offset, zlib.crc32(record))
        self._write(record)
        self._offset += len(record)
        return oid

    def close(self) -> None:
        """Finish the pack and its index and move them into place (nothing when empty)."""
        self._file.close()
        if not self._entries:
            self._tmp.unlink()
            return
        # The header's count is known only now: rewrite it, then hash the whole file once.
        with open(self._tmp, "r+b") as f:
            f.seek(8)
            f.write(struct.pack(">I", len(self._entries)))
            f.seek(0)
            sha = hashlib.sha1()
            while chunk := f.read(1 << 20):
                sha.update(chunk)
            checksum = sha.digest()
            f.seek(0, os.SEEK_END)
            f.write(checksum)
            f.flush()
            os.fsync(f.fileno())
        name = f"pack-{checksum.hex()}"
        idx_tmp = self.pack_dir / f"tmp_idx_{name}"
        with open(idx_tmp, "wb") as f:
            f.write(self._index(checksum))
            f.flush()
            os.fsync(f.fileno())
        os.replace(self._tmp, self.pack_dir / f"{name}.pack")
        os.replace(idx_tmp, self.pack_dir / f"{name}.idx")
        sync_dir(self.pack_dir)  # both names kept before a commit names their objects

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _index(self, pack_checksum: bytes) -> bytes:
        ids = sorted(self._entries)
        fanout = [0] * 256
        for raw in ids:
            fanout[raw[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        small, large = bytearray(), bytearray()
        for raw in ids:
            offset = self._entries[raw][0]
            if offset < 0x80000000:
                small += struct.pack(">I", offset)
            else:
                small += struct.pack(">I", 0x80000000 | (len(large) // 8))
                large += struct.pack(">Q", offset)
        body = b"".join([
            b"\xfftOc", struct.pack(">I", 2), struct.pack(">256I", *fanout), b"".join(ids),
            b"".join(struct.pack(">I", self._entries[r][1]) for r in ids), bytes(small),
            bytes(large), pack_checksum,
        ])
        return body + hashlib.sha1(body).digest()
