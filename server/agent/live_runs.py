"""Live runs: the turns this process drives now, each holding its branch (`locks.py`).

`claim_turn` holds the branch before any git work (so two sends cannot both pass) and
registers the run; if the block that prepares the turn fails, the branch is freed at once,
else the turn's last step frees it (`RunRegistry.end`).

`TurnGate`: at most BRAID_ACTIVE_TURNS turns in their model loop at once; the others are
started (their `run_started` sent, their branch held) and wait their turn in order. What a
turn holds while it runs (the model stream, its messages, the git objects of its checkpoints)
then peaks at that many turns, not at every socket's: 200 turns at once leave the heap
scattered with the few objects that outlive them, and it is never given back whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from server.base.records import MessageRecord, RunRecord, RunRow
from server.base.results import WaitingCall
from server.store.locks import BranchLocks, Lease


class RunningTurn(Protocol):
    """What is read of a running turn while it runs (live.snapshot for a page opened
    mid-run, session_meta for a rename): this process's TurnContext, or pg_runs.RemoteTurn
    for one another process drives."""

    pending: dict[str, bytes]

    @property
    def run(self) -> RunRecord | RunRow: ...
    @property
    def messages(self) -> list[MessageRecord]: ...

    @property
    def run_id(self) -> str: ...


@dataclass
class ActiveRun:
    session_id: str
    run_id: str
    branch: str
    lease: Lease | None = None
    task: asyncio.Task[None] | None = None
    # Why the task was cancelled: "cancel" (the user) or "shutdown" (the server).
    stop_reason: str = "cancel"
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # What a page opened mid-run shows: the turn so far and the text streaming now.
    ctx: RunningTurn | None = None
    partial: str = ""
    # Where the task is: a cancel must neither hit a task before its first step (it would
    # run none of its code, so never commit nor free its branch) nor one committing its end.
    started: bool = False
    finishing: bool = False
    stop_requested: bool = False
    # Its tool calls waiting for the user's approval (agent/approvals.py), by call id, and
    # (this process's runs only) the futures their answers (decision, reason) resolve.
    waiting: dict[str, WaitingCall] = field(default_factory=dict)
    answers: dict[str, asyncio.Future[tuple[str, str]]] = field(default_factory=dict)
    # A running command's output so far, by call id (its tail: what a page opened mid-command
    # shows; `tool_output` events bring the rest).
    output: dict[str, str] = field(default_factory=dict)
    # Set by `stop`: what a tool waiting on other runs (its sub-agents) watches.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        """Ask the turn to stop: cancel it while the model or a tool runs; a turn not yet
        started stops at its first step; one already committing its end is let finish."""
        self.stop_reason = reason
        self.stop_requested = True
        self.stopping.set()
        task = self.task
        if task is not None and self.started and not self.finishing and not task.done():
            task.cancel()


class RunRegistry:
    """Which runs this process drives. The branch lock makes them one per (session, branch)."""

    def __init__(self) -> None:
        self._by_branch: dict[tuple[str, str], ActiveRun] = {}
        # Told when a run (not a claim that never started one) has freed its branch: the
        # app starts the next queued message there (features/queue.py).
        self.on_free: Callable[[ActiveRun], None] | None = None

    def add(self, active: ActiveRun) -> ActiveRun:
        self._by_branch[(active.session_id, active.branch)] = active
        return active

    async def end(self, active: ActiveRun) -> None:
        """The run is over: out of the registry, its branch freed, its waiters woken."""
        if self._by_branch.get((active.session_id, active.branch)) is active:
            del self._by_branch[(active.session_id, active.branch)]
        try:
            if active.lease is not None:
                await active.lease.release()
        finally:
            active.done.set()
        if active.run_id and self.on_free is not None:
            self.on_free(active)

    def for_session(self, session_id: str) -> list[ActiveRun]:
        return [a for (sid, _), a in self._by_branch.items() if sid == session_id]

    def foreground(self, session_id: str) -> list[ActiveRun]:
        """Live runs the user is watching: sub-agents run on their own `sub_` branches."""
        return [a for a in self.for_session(session_id) if not a.branch.startswith("sub_")]

    def find(self, session_id: str, run_id: str) -> ActiveRun | None:
        for active in self.for_session(session_id):
            if active.run_id == run_id:
                return active
        return None

    def all(self) -> list[ActiveRun]:
        return list(self._by_branch.values())


class TurnGate:
    """At most `limit` turns drive at once (0: no bound), first come first served."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        self.waiting = 0  # turns queued for a slot
        self.driving = 0  # turns holding one

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Held while a turn drives. Cancelled while waiting (the turn was stopped before it
        could start), the waiting ends at once, with no slot taken."""
        if self._slots is None:
            yield
            return
        await self._take(self._slots)
        try:
            yield
        finally:
            self.driving -= 1
            self._slots.release()

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[None]:
        """Inside `slot`: give the slot up while the turn waits on turns it started (its
        sub-agents need slots too), and take one again after, in order."""
        if self._slots is None:
            yield
            return
        self.driving -= 1
        self._slots.release()
        try:
            yield
        finally:
            await self._take(self._slots)

    async def _take(self, slots: asyncio.Semaphore) -> None:
        """Wait for a slot (counted as waiting meanwhile), then count it as driving."""
        self.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.waiting -= 1
        self.driving += 1


@asynccontextmanager
async def claim_turn(locks: BranchLocks, runs: RunRegistry, session_id: str,
                     branch: str) -> AsyncIterator[ActiveRun]:
    """Hold `branch` for a turn about to start (run id still unknown: ""). The block must end
    with `turns.launch`; if it raises instead, the branch is freed."""
    lease = await locks.acquire(session_id, branch)
    active = runs.add(ActiveRun(session_id, "", branch, lease=lease))
    try:
        yield active
    except BaseException:
        await runs.end(active)
        raise
