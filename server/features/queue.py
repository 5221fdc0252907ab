"""The message queue (DESIGN §4 "Queue"): a message sent with `queue: true` while its
branch is busy waits in the index database (`store.queue`) and starts as an ordinary turn,
oldest first, when the branch is free.

- `send`: `send_message`'s core. Without `queue` a busy branch answers `busy`; with it the
  message runs at once when the branch is free and nothing waits before it, else it is
  queued (`{queued_id}`, event `queue_changed` with the session's queue).
- `drain`: holds the branch (`claim_turn`), claims the oldest waiting message of that
  (session, branch) in the database, opens its turn with the queued id as its run id, and
  deletes the row once the run is indexed. The app calls it when a run of this process ends
  (`RunRegistry.on_free`), after queueing (the run may have ended meanwhile), and from
  `sweep`, every few seconds and at start-up: a branch freed by something other than a run
  (a revert, an upload), a branch shown again after a checkout, or (team server) messages
  queued through another process.
- `settle_stale`: a claim whose process died before its row was deleted: the run exists
  (committed or pending, found by the queued id) → the row goes; else it waits again, in
  its place. So a kill at any point neither loses a message nor starts it twice.
- An INTERRUPTED run (a restart) does not hold the branch: the queue goes on after it. A
  run still RUNNING in the index on a free branch (its process died; a team's heartbeat is
  about to commit it INTERRUPTED) holds the queue until then, so its commit comes first.
- Edit and remove (`update_queued`, `cancel_queued`) only while the message waits: once
  started (or removed) its id names no queued message, so both answer `not_found`."""

from __future__ import annotations

import asyncio
import logging
import weakref
from functools import partial
from typing import TYPE_CHECKING, cast

from server.agent.compaction.request import check_for
from server.agent.interrupted import find_record
from server.agent.live_runs import claim_turn
from server.agent.turn_context import TurnContext, open_turn
from server.agent.turns import launch, offered_cost, start_turn
from server.base import crash, events
from server.base.errors import Busy, NotFound, TooMany
from server.base.records import QueueRow, RunRecord
from server.base.results import Queued, QueuedMessage, QueueList, RunStarted
from server.git.session import GitSession

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.queue")
USER_QUEUE_BYTES = 10_000_000  # a user's queued messages' text at most (with BRAID_USER_QUEUE)
EVENT_TEXT = 2000  # characters of a queued message's text in `queue_changed`
SWEEP_SECONDS = 2.0  # how often the app looks for waiting messages on free branches


_SHARE_LOCKS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def _share_lock(user_id: str) -> asyncio.Lock:
    """One user's check-then-add of the queue, one at a time (per process)."""
    lock = _SHARE_LOCKS.get(user_id)
    if lock is None:
        lock = _SHARE_LOCKS[user_id] = asyncio.Lock()
    return lock


class _NothingWaiting(Exception):
    """Raised inside `claim_turn` to free the branch again when no message waits."""


def _shown(row: QueueRow) -> QueuedMessage:
    return {"queued_id": row["queued_id"], "text": row["text"],
            "created_at": row["created_at"]}


async def list_queue(braid: Services, user_id: str, session_id: str) -> QueueList:
    """The session's waiting messages, oldest first."""
    handle = braid.store.get_owned(user_id, session_id)
    return {"queued": [_shown(r) for r in await braid.queue.waiting(handle.session_id)]}


async def publish(braid: Services, session_id: str, change: str, queued_id: str,
                  row: QueueRow | None = None) -> None:
    """`queue_changed` with what changed (`change`: added, updated, removed or started; the
    message added or edited in `queued`) and the ids waiting now, in order. Not the whole
    queue: with every change carrying every text, 80 queued messages of 100 KB made each
    add cost 353 ms and a socket that did not read hold gigabytes (issue 34)."""
    ids = [r["queued_id"] for r in await braid.queue.waiting(session_id)]
    shown: list[QueuedMessage] = []
    if row is not None:  # its text cut short: a tab reads the whole queue (`list_queue`)
        shown = [_shown(row)]
        shown[0]["text"] = row["text"][:EVENT_TEXT]
    braid.bus.publish(session_id, events.queue_changed(change, queued_id, shown, ids))


async def _within_share(braid: Services, user_id: str, more: int, more_bytes: int) -> None:
    """Refuse (`too_many`) what would take the user past their share of queued messages
    (BRAID_USER_QUEUE) or of their bytes."""
    count, size = await braid.queue.user_load(user_id)
    limit, max_bytes = braid.settings.user_queue, USER_QUEUE_BYTES
    if limit and count + more > limit:
        raise TooMany(f"{count} messages are queued already (at most {limit} for a user); "
                      "send this one when some have run")
    if max_bytes and size + more_bytes > max_bytes:
        raise TooMany(f"the queued messages hold {size} bytes already (at most {max_bytes} "
                      "for a user); send this one when some have run")


async def send(braid: Services, user_id: str, session_id: str, text: str,
               queue: bool = False) -> RunStarted | Queued:
    """`send_message`: `{run_id}` of the turn started, or `{queued_id}` when queued."""
    handle = braid.store.get_owned(user_id, session_id)
    if not queue:
        return {"run_id": (await start_turn(braid, handle, text)).run_id}
    branch = await handle.call(lambda git: git.branch)
    if not await braid.queue.has_waiting(handle.session_id, branch):
        try:
            return {"run_id": (await start_turn(braid, handle, text)).run_id}
        except Busy:
            pass
    async with _share_lock(handle.user_id):  # checked and added as one step
        await _within_share(braid, handle.user_id, 1, len(text.encode()))
        row = await braid.queue.add(handle.session_id, branch, text)
    await publish(braid, handle.session_id, "added", row["queued_id"], row)
    await drain(braid, handle.session_id, branch)  # the branch may have come free meanwhile
    return {"queued_id": row["queued_id"]}


async def send_to_end(braid: Services, user_id: str, session_id: str, text: str,
                      queue: bool = False) -> RunRecord | Queued:
    """The HTTP twin (`POST /api/sessions/{id}/runs`): the finished run, or `{queued_id}`."""
    from server.features.sessions import get_run

    sent = await send(braid, user_id, session_id, text, queue)
    if "run_id" not in sent:
        return sent
    run_id = cast(RunStarted, sent)["run_id"]
    active = braid.runs.find(session_id, run_id)
    if active is not None:
        await active.done.wait()
    return await get_run(braid, user_id, session_id, run_id)


async def update_queued(braid: Services, user_id: str, session_id: str, queued_id: str,
                        text: str) -> Queued:
    handle = braid.store.get_owned(user_id, session_id)
    async with _share_lock(handle.user_id):
        rows = {r["queued_id"]: r for r in await braid.queue.waiting(handle.session_id)}
        old = rows.get(queued_id)
        if old is not None:
            await _within_share(braid, handle.user_id, 0,
                                len(text.encode()) - len(old["text"].encode()))
        if old is None or not await braid.queue.update(handle.session_id, queued_id, text):
            raise NotFound(f"no queued message {queued_id} (it started, or was removed)")
    await publish(braid, handle.session_id, "updated", queued_id, {**old, "text": text})
    return {"queued_id": queued_id}


async def cancel_queued(braid: Services, user_id: str, session_id: str,
                        queued_id: str) -> Queued:
    handle = braid.store.get_owned(user_id, session_id)
    if not await braid.queue.remove(handle.session_id, queued_id):
        raise NotFound(f"no queued message {queued_id} (it started, or was removed)")
    await publish(braid, handle.session_id, "removed", queued_id)
    return {"queued_id": queued_id}


async def drain(braid: Services, session_id: str, branch: str) -> str | None:
    """Start the oldest message waiting for (session, branch) if the branch is free; the
    run id started (the queued id), or None."""
    try:
        handle = braid.store.get(session_id)
    except NotFound:  # deleted: its queue goes with it
        await braid.queue.delete_session(session_id)
        return None
    if not await braid.queue.has_waiting(session_id, branch):  # most ends of a run
        return None
    row: QueueRow | None = None
    tools = await offered_cost(braid, handle)

    def prepare(git: GitSession) -> TurnContext:
        assert row is not None
        if git.branch != branch:  # the session shows another branch: wait for it
            raise Busy(f"the session shows branch {git.branch}, not {branch}")
        return open_turn(git, handle, row["text"], {}, run_id=row["queued_id"],
                         compact_if=check_for(braid, row["text"], tools))

    try:
        async with claim_turn(braid.locks, braid.runs, session_id, branch) as active:
            row = await braid.queue.claim(session_id, branch)
            if row is None:
                raise _NothingWaiting
            crash.at("queue.after_claim")
            try:
                if await _dead_run_on(braid, session_id, branch):
                    raise Busy("a dead process's run comes first")  # its INTERRUPTED commit
                ctx = await handle.call(prepare)
            except BaseException:
                await braid.queue.unclaim(row["queued_id"])
                raise
            await launch(braid, handle, ctx, active)
    except (Busy, _NothingWaiting):
        return None
    crash.at("queue.after_launch")
    await braid.queue.done(row["queued_id"])
    await publish(braid, session_id, "started", row["queued_id"])
    return row["queued_id"]


async def _dead_run_on(braid: Services, session_id: str, branch: str) -> bool:
    """A run the index still says is RUNNING on the branch, although the branch is free: a
    dead process's (team server), which the heartbeat is about to commit INTERRUPTED."""
    return any(r["session_id"] == session_id and (r["branch"] or "main") == branch
               for r in await braid.index.runs_with_status("RUNNING"))


async def settle_stale(braid: Services) -> None:
    """Claims a dead process left: started (its run exists) → done, else waiting again."""
    for row in await braid.queue.stale_claims():
        qid, sid = row["queued_id"], row["session_id"]
        try:
            handle = braid.store.get(sid)
        except NotFound:
            await braid.queue.done(qid)
            continue
        if any(r["run_id"] == qid for r in await braid.index.list_runs(sid)) or \
                await handle.call(partial(_has_record, run_id=qid)):
            await braid.queue.done(qid)
        else:
            await braid.queue.unclaim(qid)
            log.warning("queued message %s of session %s: its process died before starting "
                        "it; it waits again", qid, sid)


def _has_record(git: GitSession, run_id: str) -> bool:
    return find_record(git, run_id) is not None


async def sweep(braid: Services) -> int:
    """Settle stale claims, then start what waits on a free branch. Returns how many
    started."""
    await settle_stale(braid)
    started = 0
    for session_id, branch in await braid.queue.branches_waiting():
        try:
            if await drain(braid, session_id, branch) is not None:
                started += 1
        except Exception:  # noqa: BLE001 - one broken session must not stop the others
            log.exception("could not start the queue of session %s", session_id)
    return started
