"""Packing at rest (DESIGN §3): a session's loose objects are packed in the background once it
has been idle for a moment, never on a turn's path.

Thresholds like `git gc --auto`'s, scaled to what a checkpoint writes: at least
LOOSE_LIMIT loose objects start an incremental `git repack -d` (only the loose objects, with
deltas between them: successive versions of a history folder's tree are nearly the same);
PACK_LIMIT packs are consolidated by `git repack -a -d -k`. `-k` keeps unreachable
objects: packing never deletes anything, and a blob a live turn wrote a moment before its
commit stays loose (repack only removes loose objects it has just packed). The git CLI does
the work in its own process, so the session's worker thread never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger("braid.packing")

IDLE_SECONDS = 2.0
LOOSE_LIMIT = 200
PACK_LIMIT = 12
_GIT = ("git", "-c", "gc.auto=0", "-c", "pack.threads=1", "-c", "core.fsync=none")


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
    """What packing this session now takes (empty when it is at rest)."""
    git_dir = folder / ".git"
    base = [*_GIT, "-C", str(folder), "repack", "-q", "-d"]
    out = []
    if loose_objects(git_dir) >= LOOSE_LIMIT:
        out.append(base)
    if pack_count(git_dir) + len(out) >= PACK_LIMIT:
        out.append([*base, "-a", "-k"])
    return out


def pack_now(folder: Path) -> None:
    """Pack a session at once, as the idle packer would (benchmarks, tools)."""
    for cmd in repack_commands(folder):
        subprocess.run(cmd, check=True, capture_output=True)


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
                    proc = await asyncio.create_subprocess_exec(
                        *cmd, stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.PIPE)
                    _, err = await proc.communicate()
                    if proc.returncode != 0:
                        log.warning("packing %s failed: %s", folder, err.decode()[:300])
                        return
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
