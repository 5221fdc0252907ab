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
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from server.base.records import MessageRecord, RunRecord, RunRow
from server.base.results import WaitingCall
from server.git.branches import is_sub
from server.store.locks import BranchLocks, Lease

ANSWERED_KEPT = 4096  # answered calls remembered (a few bytes each)


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
    partial_id: str = ""  # the id the streaming message will have (its partial copy's too)
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
        # Tool calls answered here (session, run, call) → the decision, the newest
        # ANSWERED_KEPT: a second answer to one call is a `conflict`, never a silent 200.
        self._answered: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        # Sub-agent worktrees in use, by session: from before a worktree is made until it is
        # removed (a child's outlives its run's branch lock by its last commit). A spawn
        # prunes what a dead server left, never these: the user's Spawn once removed the
        # worktrees of the model's live children (issue 34). Read on the session's thread
        # as a copy (`frozenset`, made whole under the GIL).
        self._worktrees: dict[str, set[str]] = {}
        # Sub-agent runs going on, by user, and started, by the user's run they serve
        # (fair shares: BRAID_USER_SUBAGENTS at once, MESSAGE_SUBAGENTS per message).
        self.children_live: dict[str, int] = {}
        self.children_started: dict[str, int] = {}
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
        self.children_started.pop(active.run_id, None)  # a user's run: its count ends
        if active.run_id and self.on_free is not None:
            self.on_free(active)

    def answered(self, session_id: str, run_id: str, call_id: str) -> str | None:
        """The decision a call of this process's runs was given, if it was answered."""
        return self._answered.get((session_id, run_id, call_id))

    def mark_answered(self, session_id: str, run_id: str, call_id: str, decision: str) -> bool:
        """Take the one answer a call gets: False if it had one already."""
        key = (session_id, run_id, call_id)
        if key in self._answered:
            return False
        self._answered[key] = decision
        while len(self._answered) > ANSWERED_KEPT:
            self._answered.popitem(last=False)
        return True

    def worktrees(self, session_id: str) -> set[str]:
        """The session's sub-agent worktrees in use (the set itself: add, discard)."""
        return self._worktrees.setdefault(session_id, set())

    def worktree_done(self, session_id: str, branch: str) -> None:
        found = self._worktrees.get(session_id)
        if found is not None:
            found.discard(branch)
            if not found:
                del self._worktrees[session_id]

    def take_children(self, user_id: str, root_run_id: str, count: int, at_once: int,
                      per_message: int) -> str | None:
        """Count `count` sub-agent runs of the user, for the user's run `root_run_id`;
        the reason, and nothing counted, when that would pass a bound (0: none)."""
        live = self.children_live.get(user_id, 0)
        started = self.children_started.get(root_run_id, 0)
        if at_once and live + count > at_once:
            return (f"{live} sub-agent runs of this user are going on (at most {at_once} at "
                    "once)")
        if per_message and started + count > per_message:
            return (f"{started} sub-agent runs were started for this message already (at "
                    f"most {per_message})")
        self.children_live[user_id] = live + count
        if root_run_id:  # the user's own Spawn counts at once only
            self.children_started[root_run_id] = started + count
        return None

    def child_ended(self, user_id: str, count: int = 1) -> None:
        left = self.children_live.get(user_id, 0) - count
        if left > 0:
            self.children_live[user_id] = left
        else:
            self.children_live.pop(user_id, None)

    def for_session(self, session_id: str) -> list[ActiveRun]:
        return [a for (sid, _), a in self._by_branch.items() if sid == session_id]

    def foreground(self, session_id: str) -> list[ActiveRun]:
        """Live runs the user is watching: sub-agents run on their own `sub_` branches."""
        return [a for a in self.for_session(session_id) if not is_sub(a.branch)]

    def find(self, session_id: str, run_id: str) -> ActiveRun | None:
        for active in self.for_session(session_id):
            if active.run_id == run_id:
                return active
        return None

    def all(self) -> list[ActiveRun]:
        return list(self._by_branch.values())


@dataclass
class _Held:
    """One turn's place at the gate: its user's share, and whether it holds a slot now."""

    user_id: str
    holding: bool = False


# The place of the turn this task drives (set by `slot`): `lend` gives it up and takes it
# back wherever the turn waits (its sub-agents, an approval), without being handed it.
_HELD: ContextVar[_Held | None] = ContextVar("braid_turn_slot", default=None)


class TurnGate:
    """At most `limit` turns drive at once (0: no bound), and at most `per_user` of one
    user's (0: no bound), first come first served. A turn waiting on someone (its
    sub-agents, the user's answer) gives its slot back meanwhile (`lend`): sixteen
    unanswered approvals of one user once held every slot, and another user's `say hello`
    waited until they were stopped (issue 34)."""

    def __init__(self, limit: int, per_user: int = 0) -> None:
        self.limit = limit
        self.per_user = per_user
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        # Each user's share, while one of their turns is at the gate: (semaphore, turns).
        self._users: dict[str, tuple[asyncio.Semaphore, int]] = {}
        self.waiting = 0  # turns queued for a slot
        self.driving = 0  # turns holding one
        self._user_driving: dict[str, int] = {}

    def user_driving(self, user_id: str) -> int:
        """How many of the user's turns hold a slot now."""
        return self._user_driving.get(user_id, 0)

    @asynccontextmanager
    async def slot(self, user_id: str = "") -> AsyncIterator[None]:
        """Held while a turn drives. Cancelled while waiting (the turn was stopped before it
        could start), the waiting ends at once, with no slot taken."""
        if self._slots is None and self.per_user <= 0:
            yield
            return
        held = _Held(user_id)
        self._join(user_id)
        token = _HELD.set(held)
        try:
            await self._take(held)
            try:
                yield
            finally:
                self._give(held)
        finally:
            _HELD.reset(token)
            self._leave(user_id)

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[None]:
        """Inside `slot`: give the slot up while the turn waits on others (its sub-agents
        need slots too; the user may take a while to answer), and take one again after, in
        order. Outside a slot (a turn that holds none) it only waits."""
        held = _HELD.get()
        if held is None or not held.holding:
            yield
            return
        self._give(held)
        try:
            yield
        finally:
            await self._take(held)

    def _join(self, user_id: str) -> None:
        if self.per_user > 0:
            sem, turns = self._users.get(user_id) or (asyncio.Semaphore(self.per_user), 0)
            self._users[user_id] = (sem, turns + 1)

    def _leave(self, user_id: str) -> None:
        found = self._users.get(user_id)
        if found is not None:
            if found[1] <= 1:
                del self._users[user_id]
            else:
                self._users[user_id] = (found[0], found[1] - 1)

    async def _take(self, held: _Held) -> None:
        """Wait for the user's share, then a slot (counted as waiting meanwhile), then count
        it as driving. Cancelled, it holds nothing."""
        user = self._users.get(held.user_id)
        self.waiting += 1
        try:
            if user is not None:
                await user[0].acquire()
            if self._slots is not None:
                try:
                    await self._slots.acquire()
                except BaseException:
                    if user is not None:
                        user[0].release()
                    raise
        finally:
            self.waiting -= 1
        held.holding = True
        self.driving += 1
        self._user_driving[held.user_id] = self._user_driving.get(held.user_id, 0) + 1

    def _give(self, held: _Held) -> None:
        if not held.holding:  # a `lend` cancelled while taking its slot back
            return
        held.holding = False
        self.driving -= 1
        left = self._user_driving.pop(held.user_id, 1) - 1
        if left:
            self._user_driving[held.user_id] = left
        if self._slots is not None:
            self._slots.release()
        user = self._users.get(held.user_id)
        if user is not None:
            user[0].release()


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
