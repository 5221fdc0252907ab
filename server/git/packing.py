"""Packing at rest (DESIGN §3): a session's loose objects are packed in the background once it
has been idle for a moment, never on a turn's path.

Thresholds like `git gc --auto`'s, scaled to what a checkpoint writes: at least
LOOSE_LIMIT loose objects start an incremental `git repack` (only the loose objects, with
deltas between them: successive versions of a history folder's tree are nearly the same);
PACK_LIMIT packs are consolidated by `git repack -a -k`. `-k` keeps unreachable
objects: packing never deletes anything, and a blob a live turn wrote a moment before its
commit stays loose (only loose objects found in a pack are removed). The git CLI does
the work in its own process, so the session's worker thread never waits for it.

Never `-d`: it runs `git prune-packed`, which also removes every fan-out folder
(`objects/xx/`) it empties, and a writer that has just made or found that folder then
fails to create its temporary file in it, or (libgit2) to rename one into it: one turn in
a few thousand ended ERROR under load (issue 21, row 12). `prune_packed` here removes the
packed loose objects and the packs made redundant, and leaves every folder in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
from pathlib import Path

from server.base.fsops import sync_dir

log = logging.getLogger("braid.packing")

IDLE_SECONDS = 2.0
LOOSE_LIMIT = 200
PACK_LIMIT = 12
# The pack and its index are synced by git (then their folder, here) before a loose object
# they hold is removed: a power cut never takes an object a ref reaches (DESIGN "Durability").
_GIT = ("git", "-c", "gc.auto=0", "-c", "pack.threads=1", "-c", "core.fsync=pack,pack-metadata",
        "-c", "core.fsyncMethod=fsync")
_HEX = frozenset("0123456789abcdef")


def loose_objects(git_dir: Path) -> int:
    count = 0
    objects = git_dir / "objects"
    try:
        for entry in os.scandir(objects):
            if len(entry.name) == 2 and entry.is_dir():
                count += sum(1 for name in os.listdir(entry.path) if not name.startswith("tmp"))
    except FileNotFoundError:
        return 0
    return count


def pack_count(git_dir: Path) -> int:
    try:
        return sum(1 for n in os.listdir(git_dir / "objects" / "pack") if n.endswith(".pack"))
    except FileNotFoundError:
        return 0


def repack_commands(folder: Path) -> list[list[str]]:
    """What packing this session now takes (empty when it is at rest); each command is
    followed by `prune_packed`."""
    git_dir = folder / ".git"
    base = [*_GIT, "-C", str(folder), "repack", "-q"]
    out = []
    if loose_objects(git_dir) >= LOOSE_LIMIT:
        out.append(base)
    if pack_count(git_dir) + len(out) >= PACK_LIMIT:
        out.append([*base, "-a", "-k"])
    return out


def pack_ids(idx: Path) -> set[bytes]:
    """The object ids a pack holds, read from its version-2 index (`.idx`): the 8-byte
    header, 256 fan-out counts (the last is the total), then the sorted 20-byte ids."""
    data = idx.read_bytes()
    if data[:8] != b"\377tOc\0\0\0\2":
        raise ValueError(f"{idx} is not a version 2 pack index")
    count = int.from_bytes(data[8 + 255 * 4:8 + 256 * 4], "big")
    start = 8 + 256 * 4
    return {data[i:i + 20] for i in range(start, start + 20 * count, 20)}


def prune_packed(git_dir: Path, since: float | None = None) -> None:
    """What `git repack -d` removes, but never a fan-out folder: each loose object a pack
    holds and, after `-a` (`since` = its start), each pack older than `since` whose objects
    all lie in another pack. Packs that appear meanwhile (an update from source) are kept."""
    objects = git_dir / "objects"
    with contextlib.suppress(FileNotFoundError):
        sync_dir(objects / "pack")  # the new pack's names are kept before a loose copy goes
    packs = _packs(objects / "pack")
    if since is not None and packs:
        _drop_redundant(packs, since)
    packed = set().union(*packs.values()) if packs else set()
    for fan in os.scandir(objects):
        if len(fan.name) != 2 or not fan.is_dir():
            continue
        for name in os.listdir(fan.path):
            if len(name) == 38 and _HEX.issuperset(name) \
                    and bytes.fromhex(fan.name + name) in packed:
                try:
                    os.unlink(f"{fan.path}/{name}")
                except FileNotFoundError:
                    pass


def _packs(pack_dir: Path) -> dict[Path, set[bytes]]:
    packs: dict[Path, set[bytes]] = {}
    for idx in pack_dir.glob("pack-*.idx"):
        try:
            if idx.with_suffix(".pack").exists():
                packs[idx] = pack_ids(idx)
        except (OSError, ValueError):
            continue
    return packs


def _drop_redundant(packs: dict[Path, set[bytes]], since: float) -> None:
    """Remove (from disk and `packs`) each pack from before `since` that the biggest holds."""
    biggest = max(packs, key=lambda p: len(packs[p]))
    for idx, ids in list(packs.items()):
        if idx != biggest and ids <= packs[biggest] and _older(idx, since) \
                and not idx.with_suffix(".keep").exists():
            for suffix in (".pack", ".idx", ".rev", ".bitmap"):
                idx.with_suffix(suffix).unlink(missing_ok=True)
            del packs[idx]


def _older(idx: Path, since: float) -> bool:
    try:
        return idx.stat().st_mtime < since
    except FileNotFoundError:
        return False


def pack_now(folder: Path) -> None:
    """Pack a session at once, as the idle packer would (benchmarks, tools)."""
    for cmd in repack_commands(folder):
        started = time.time()
        subprocess.run(cmd, check=True, capture_output=True)
        prune_packed(folder / ".git", started if "-a" in cmd else None)


class Packer:
    """Packs sessions that have been idle for IDLE_SECONDS, one at a time."""

    def __init__(self) -> None:
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._idle: dict[str, asyncio.Event] = {}
        self.enabled = True

    def touch(self, session_id: str, folder: Path) -> None:
        """The session was just used: (re)start its idle timer."""
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        old = self._timers.pop(session_id, None)
        if old is not None:
            old.cancel()
        self._timers[session_id] = loop.call_later(IDLE_SECONDS, self._start, session_id,
                                                   folder)

    def idle(self, session_id: str) -> bool:
        """No repack of the session is due or going on."""
        return session_id not in self._timers and session_id not in self._busy

    async def wait_idle(self, session_id: str) -> None:
        """Wait for a repack of the session to end, and hold off new ones until the next
        touch (a fork hard-links the object files: they must not move meanwhile)."""
        timer = self._timers.pop(session_id, None)
        if timer is not None:
            timer.cancel()
        done = self._idle.get(session_id)
        if done is not None:
            await done.wait()

    def _start(self, session_id: str, folder: Path) -> None:
        self._timers.pop(session_id, None)
        if session_id in self._busy or not self.enabled:
            return
        task = asyncio.get_running_loop().create_task(self._pack(session_id, folder))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pack(self, session_id: str, folder: Path) -> None:
        self._busy.add(session_id)
        done = self._idle[session_id] = asyncio.Event()
        try:
            async with self._lock:  # one repack at a time: the machine keeps its cores
                if not folder.exists():
                    return
                for cmd in await asyncio.to_thread(repack_commands, folder):
                    started = time.time()
                    proc = await asyncio.create_subprocess_exec(
                        *cmd, stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.PIPE)
                    _, err = await proc.communicate()
                    if proc.returncode != 0:
                        log.warning("packing %s failed: %s", folder, err.decode()[:300])
                        return
                    await asyncio.to_thread(prune_packed, folder / ".git",
                                            started if "-a" in cmd else None)
        except Exception:  # noqa: BLE001 - packing is an optimisation; it never breaks a session
            log.exception("packing %s failed", folder)
        finally:
            self._busy.discard(session_id)
            done.set()
            if self._idle.get(session_id) is done:
                del self._idle[session_id]

    async def close(self) -> None:
        self.enabled = False
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        # A repack under way finishes (its git process must not be left behind).
        for task in list(self._tasks):
            try:
                await asyncio.wait_for(task, timeout=60)
            except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
