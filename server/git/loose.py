"""Loose objects written as git writes them (DESIGN "Checkpoints"): deflated into a
temporary file in the object's fan-out folder, renamed to `objects/xx/yyyy…` unless that
exists (one `renameat2` call, fsops.py); a kill -9 leaves a `tmp_obj_` file at worst, never
a torn object, and a power cut neither (each file is synced before its rename, each folder
that gained a name once per batch, before the caller moves a branch: DESIGN "Durability").

A checkpoint's objects (a dozen: blobs, the trees on the changed paths, the commit) are made
in memory and their files written together at its end, on a few threads: on a busy disk a
file's creation waits milliseconds for the file system's journal, and waiting for a dozen at
once costs about one wait instead of twelve in a row (bench/checkpoint.py, section 3).
"""

from __future__ import annotations

import functools
import hashlib
import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server.base.fsops import rename_new, sync_all, sync_dir
from server.base.pools import IdlingThreadPool

_WRITERS = 4  # threads a checkpoint's object files are written on (this one and 3 more)
_ATTEMPTS = 5  # writes of one object when its folder or file vanishes under a prune
_LEVEL = 1  # git's core.looseCompression default (and libgit2's): loose objects are packed later

# The threads checkpoints' object files are written on, shared by every session.
WRITERS = IdlingThreadPool(_WRITERS - 1, 5.0, name="braid-objects")


class LooseWriter:
    """Loose objects written as git writes them: deflated into a temporary file, renamed to
    `objects/xx/yyyy…` unless that exists (one `renameat2` call, fsops.py).

    Between `begin()` and `finish()` (a checkpoint) the objects are only made in memory and
    their files are written at `finish()`, several at once: on a busy disk a file's creation
    waits milliseconds for the file system's journal, and a checkpoint makes a dozen, so
    waiting for them together costs about one wait instead of twelve in a row. Nothing may
    read them before `finish()` (the caller moves its branch after it)."""

    def __init__(self, objects: Path, pool: ThreadPoolExecutor | None = WRITERS) -> None:
        self.objects = objects
        # Paths as bytes, joined by hand: pathlib costs more than the write (~40 us).
        self._base = os.fsencode(objects) + b"/"
        self._made: set[bytes] = set()  # fan-out folders known to exist
        self._batch: dict[bytes, bytes] | None = None  # hex id -> deflated bytes, unwritten
        self._pool = pool
        self._grown = False  # a fan-out folder made since the last sync of objects/

    def write(self, kind: bytes, data: bytes) -> bytes:
        header = b"%s %d\0" % (kind, len(data))
        sha = hashlib.sha1(header)
        sha.update(data)
        raw = sha.digest()
        hexid = raw.hex().encode()
        deflate = zlib.compressobj(_LEVEL)
        body = deflate.compress(header) + deflate.compress(data) + deflate.flush()
        if self._batch is not None:
            self._batch[hexid] = body
        else:  # alone: durable before it returns
            self._put(hexid, body)
            self._sync_folders({self._base + hexid[:2]})
        return raw

    def begin(self) -> None:
        """Keep the objects written from now on in memory until `finish()`."""
        if self._batch is None:
            self._batch = {}

    def settle(self) -> None:
        """Write what is kept now (something is about to read it) and go on keeping."""
        if self._batch:
            self.finish()
            self.begin()

    def finish(self, also: Sequence[Callable[[], None]] = ()) -> None:
        """Write the objects kept since `begin()` (several files at once) and stop keeping.
        When it returns they survive a power cut (DESIGN "Durability"): each file's data
        was synced before its rename, then each folder that gained a name, once, together
        with the syncs `also` (the checkpoint's files in the working tree)."""
        batch, self._batch = self._batch, None
        if not batch:
            sync_all(also, self._pool)
            return
        items = list(batch.items())
        pool = self._pool
        if pool is None or len(items) < 2:
            self._sync_folders(self._put_all(items), also)
            return
        # A share for each of a few threads, one share on this thread: all are waited for.
        shares = [items[i::_WRITERS] for i in range(min(_WRITERS, len(items)))]
        futures = [pool.submit(self._put_all, share) for share in shares[1:]]
        error: BaseException | None = None
        named: set[bytes] = set()
        try:
            named |= self._put_all(shares[0])
        except BaseException as e:  # noqa: BLE001 - raised after the others are done
            error = e
        for future in futures:
            try:
                named |= future.result()
            except BaseException as e:  # noqa: BLE001
                error = error or e
        if error is not None:
            raise error
        self._sync_folders(named, also)

    def _sync_folders(self, named: set[bytes],
                      also: Sequence[Callable[[], None]] = ()) -> None:
        """The folders that gained a name, synced together (and objects/ for a new one)."""
        if self._grown:
            self._grown = False
            named.add(self._base)
        sync_all([*(functools.partial(sync_dir, p) for p in named), *also], self._pool)

    def _put_all(self, items: list[tuple[bytes, bytes]]) -> set[bytes]:
        """Write each one (the folders given a new name); the first failure is raised once
        the others are written."""
        error: OSError | None = None
        named: set[bytes] = set()
        for hexid, body in items:
            try:
                self._put(hexid, body)
                # Synced even when the object was there: another worktree's writer may
                # have named it and not yet synced its folder.
                named.add(self._base + hexid[:2])
            except OSError as e:
                error = error or e
        if error is not None:
            raise error
        return named

    def _put(self, hexid: bytes, body: bytes) -> bool:
        """Write one object (True when it got a new name, False when it was there)."""
        # A fan-out folder, or the object itself (packed meanwhile), may vanish under a
        # `git prune-packed` (a repack's `-d`, run by hand or by an older Braid): then the
        # whole write is made again, which finds or makes everything anew.
        for attempt in range(_ATTEMPTS):
            try:
                return self._put_once(hexid, body)
            except FileNotFoundError:
                self._made.discard(self._base + hexid[:2])
                if attempt == _ATTEMPTS - 1:
                    raise
        return False  # not reached: the last attempt returns or raises

    def _put_once(self, hexid: bytes, body: bytes) -> bool:
        folder = self._base + hexid[:2]
        # In the object's own folder, as git does: the rename stays in one folder, and git
        # (fsck, prune) knows a `tmp_obj_` file a killed process left there.
        tmp = folder + b"/tmp_obj_" + os.urandom(6).hex().encode()
        fd = self._create(folder, tmp)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
            # Its data on disk before its name: after a cut, a name never holds a torn
            # object (which a later write of the same object would keep, finding it there).
            os.fsync(fd)
        finally:
            os.close(fd)
        path = folder + b"/" + hexid[2:]
        if not rename_new(tmp, path):  # there already (a tree seen before): kept, freshened
            os.unlink(tmp)
            os.utime(path)
            return False
        return True

    def _create(self, folder: bytes, tmp: bytes) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        if folder not in self._made:
            try:
                os.mkdir(folder)
            except FileExistsError:
                pass
            else:
                self._grown = True  # objects/ gained a name: synced with the batch
            self._made.add(folder)
        return os.open(tmp, flags, 0o444)
