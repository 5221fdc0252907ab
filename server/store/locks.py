"""Branch locks: one holder at a time per (session, branch).

A turn, a revert or unrevert, an upload, a merge and a sub-agent's result each hold the
branch they write on; a second claimant gets `Busy` (or, with `wait=True`, waits its turn).
The interface is small and backend-neutral: `LocalBranchLocks` keeps them in this process;
a shared backend (PostgreSQL advisory locks, where several processes serve one data dir)
implements `acquire` and `held` and returns its own `Lease`.

    async with braid.locks.hold(session_id, branch):    # a revert: the block holds it
        ...
    lease = await braid.locks.acquire(session_id, branch)  # a turn: released at its end
    ...
    await lease.release()

Whatever holds the branch the session shows reads its name first, then holds it (an await):
a checkout queued in between may move the session, so the work in the session's lane runs
through `on_branch`, which re-checks it (`hold_shown` does both for a block).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from server.base.errors import Busy

if TYPE_CHECKING:
    from server.git.session import GitSession
    from server.store.session_store import SessionHandle

T = TypeVar("T")


class Lease(ABC):
    """A held branch. `release` is idempotent and never raises for a lease already gone."""

    def __init__(self, session_id: str, branch: str) -> None:
        self.session_id = session_id
        self.branch = branch

    @abstractmethod
    async def release(self) -> None: ...


class BranchLocks(ABC):
    @abstractmethod
    async def acquire(self, session_id: str, branch: str, *, wait: bool = False) -> Lease:
        """Hold `branch` of the session: `Busy` if someone holds it (unless `wait`)."""

    @abstractmethod
    async def held(self, session_id: str) -> set[str]:
        """The session's branches held now, by anyone: "is anything going on here?"."""

    @asynccontextmanager
    async def hold(self, session_id: str, branch: str, *,
                   wait: bool = False) -> AsyncIterator[Lease]:
        """Hold `branch` for the block, whatever way the block ends."""
        lease = await self.acquire(session_id, branch, wait=wait)
        try:
            yield lease
        finally:
            await lease.release()


def on_branch(branch: str, work: Callable[[GitSession], T]) -> Callable[[GitSession], T]:
    """`work` for the session's lane, done only while `branch` is still the one checked out
    (`Busy` and nothing done when a checkout moved the session since it was read)."""

    def guarded(git: GitSession) -> T:
        if git.branch != branch:
            raise Busy(f"the session switched from branch {branch} to {git.branch}")
        return work(git)

    return guarded


@asynccontextmanager
async def hold_shown(locks: BranchLocks, handle: SessionHandle) -> AsyncIterator[str]:
    """Hold the branch the session shows for the block, whatever way it ends; yields its
    name, for the block's lane calls (`on_branch`)."""
    branch = await handle.call(lambda git: git.branch)
    async with locks.hold(handle.session_id, branch):
        yield branch


def busy(branch: str) -> Busy:
    return Busy(f"a run is already going on branch {branch}")


class LocalBranchLocks(BranchLocks):
    """The embedded default: locks in this process's memory (one event loop, no await
    between the check and the take, so two claimants can never both pass)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], LocalLease] = {}

    async def acquire(self, session_id: str, branch: str, *, wait: bool = False) -> Lease:
        key = (session_id, branch)
        while (holder := self._held.get(key)) is not None:
            if not wait:
                raise busy(branch)
            await holder.freed.wait()
        lease = self._held[key] = LocalLease(self, session_id, branch)
        return lease

    async def held(self, session_id: str) -> set[str]:
        return {branch for sid, branch in self._held if sid == session_id}

    def free(self, lease: LocalLease) -> None:
        key = (lease.session_id, lease.branch)
        if self._held.get(key) is lease:
            del self._held[key]
        lease.freed.set()


class LocalLease(Lease):
    def __init__(self, locks: LocalBranchLocks, session_id: str, branch: str) -> None:
        super().__init__(session_id, branch)
        self.locks = locks
        self.freed = asyncio.Event()

    async def release(self) -> None:
        self.locks.free(self)
