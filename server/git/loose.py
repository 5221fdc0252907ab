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

import contextlib
import functools
import hashlib
import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from server.base.fsops import SYNCERS, rename_new, sync_all, sync_dir
from server.base.pools import IdlingThreadPool

_WRITERS = 4  # threads a checkpoint's object files are written on (this one and 3 more)
_ATTEMPTS = 5  # writes of one object when its folder or file vanishes under a prune
_LEVEL = 1  # git's core.looseCompression default (and libgit2's): loose objects are packed later

# The threads checkpoints' object files are written on, shared by every session.
WRITERS = IdlingThreadPool(_WRITERS - 1, 5.0, name="braid-objects")


def write_unsynced(objects: Path, kind: bytes, data: bytes) -> bytes:
    """One object written into a repository no one reads yet, nothing synced (the caller
    syncs the new folder whole: a fork). Its raw id."""
    header = b"%s %d\0" % (kind, len(data))
    raw = hashlib.sha1(header + data).digest()
    hexid = raw.hex()
    folder = objects / hexid[:2]
    folder.mkdir(exist_ok=True)
    (folder / hexid[2:]).write_bytes(zlib.compress(header + data, _LEVEL))
    return raw


class _Staged(NamedTuple):
    hexid: bytes
    body: bytes
    tmp: bytes  # its temporary file, written, open as `fd`
    fd: int


def _drop(staged: list[_Staged]) -> None:
    """Temporary files given up: closed and removed."""
    for s in staged:
        os.close(s.fd)
        with contextlib.suppress(OSError):
            os.unlink(s.tmp)


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
        # Without a pool (tests), the syncs too run one after another here.
        self._syncs: Executor | None = SYNCERS if pool is not None else None
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
        """Write the objects kept since `begin()` and stop keeping. When it returns they
        survive a power cut (DESIGN "Durability"), in two waits on the disk however many
        objects: every file written (several threads), then every file's data synced at
        once together with the syncs `also` (the checkpoint's files in the working tree),
        then each named (a name never holds data not on disk), then every folder that
        gained a name synced at once. A file that could not be written is raised once the
        others are written and named."""
        batch, self._batch = self._batch, None
        if not batch:
            sync_all(also, self._syncs)
            return
        staged, error = self._stage_shares(list(batch.items()))
        try:
            sync_all([*(functools.partial(os.fsync, s.fd) for s in staged), *also], self._syncs)
        except BaseException:
            _drop(staged)
            raise
        for s in staged:
            os.close(s.fd)
        self._sync_folders(self._name_all(staged))
        if error is not None:
            raise error

    def _stage_shares(self, items: list[tuple[bytes, bytes]]
                      ) -> tuple[list[_Staged], BaseException | None]:
        """Each object's temporary file written, not synced: a share on each of a few
        threads (a file's creation may wait on the journal), one share here. The files
        written, and the first failure."""
        pool = self._pool
        if pool is None or len(items) < 2:
            return self._stage_all(items)
        shares = [items[i::_WRITERS] for i in range(min(_WRITERS, len(items)))]
        futures = [pool.submit(self._stage_all, share) for share in shares[1:]]
        staged, error = self._stage_all(shares[0])
        for future in futures:
            try:
                more, failed = future.result()
            except BaseException as e:  # noqa: BLE001 - raised after the others are done
                more, failed = [], e
            staged += more
            error = error or failed
        return staged, error

    def _stage_all(self, items: list[tuple[bytes, bytes]]
                   ) -> tuple[list[_Staged], BaseException | None]:
        staged: list[_Staged] = []
        error: BaseException | None = None
        for hexid, body in items:
            try:
                staged.append(self._stage(hexid, body))
            except OSError as e:
                error = error or e
        return staged, error

    def _stage(self, hexid: bytes, body: bytes) -> _Staged:
        """The object's data in a temporary file in its fan-out folder, left open (its
        fsync comes with the batch's). A folder a prune removed meanwhile is made again."""
        folder = self._base + hexid[:2]
        for attempt in range(_ATTEMPTS):
            tmp = folder + b"/tmp_obj_" + os.urandom(6).hex().encode()
            try:
                fd = self._create(folder, tmp)
            except FileNotFoundError:
                self._made.discard(folder)
                if attempt == _ATTEMPTS - 1:
                    raise
                continue
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
            return _Staged(hexid, body, tmp, fd)
        raise AssertionError("not reached")  # the last attempt returns or raises

    def _name_all(self, staged: list[_Staged]) -> set[bytes]:
        """Each synced file renamed to its object's name (or dropped, the object there
        already); the folders given a name (or holding one: synced even when the object was
        there, as another worktree's writer may have named it and not yet synced its
        folder). An object a prune took meanwhile is written again, alone."""
        named: set[bytes] = set()
        for s in staged:
            folder = self._base + s.hexid[:2]
            path = folder + b"/" + s.hexid[2:]
            try:
                if not rename_new(s.tmp, path):  # there already: kept, freshened
                    os.unlink(s.tmp)
                    os.utime(path)
            except FileNotFoundError:
                with contextlib.suppress(OSError):
                    os.unlink(s.tmp)
                self._put(s.hexid, s.body)
            named.add(folder)
        return named

    def _sync_folders(self, named: set[bytes],
                      also: Sequence[Callable[[], None]] = ()) -> None:
        """The folders that gained a name, synced together (and objects/ for a new one)."""
        if self._grown:
            self._grown = False
            named.add(self._base)
        sync_all([*(functools.partial(sync_dir, p) for p in named), *also], self._syncs)

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
