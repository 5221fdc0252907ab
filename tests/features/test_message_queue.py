"""The message queue through the core `Braid` (SQLite index): a message sent with `queue`
while its branch is busy waits, runs in order when the branch is free (as an ordinary turn,
its run id the queued id), can be edited or removed while it waits, and belongs to its
session's user. Parameters are parsed as the socket parses them (`call_action`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import call_action, git, new_session, next_event
from server.app.braid import Braid
from server.base.errors import BadRequest, Busy, NotFound, TooMany
from server.features import queue, sessions
from server.store.users import DEFAULT_USER

USER = DEFAULT_USER
SLOW = "slow 100\nsay " + " ".join(f"w{i}" for i in range(20))


async def wait_runs(braid: Braid, sid: str, count: int, timeout: float = 30) -> list[Any]:
    """The session's runs once `count` of them have ended."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        runs = (await sessions.session_info(braid, USER, sid))["runs"]
        if len(runs) >= count and all(r["status"] != "RUNNING" for r in runs):
            return runs
        assert asyncio.get_running_loop().time() < deadline, runs
        await asyncio.sleep(0.05)


async def user_texts(braid: Braid, sid: str, run_id: str) -> list[str]:
    run = await sessions.get_run(braid, USER, sid, run_id)
    return [m["content"] for m in run["messages"] if m["role"] == "user"]


async def test_queued_while_busy_then_run_in_order(braid: Braid) -> None:
    sid, path = await new_session(braid)
    events = braid.bus.subscribe(sid)
    first = await call_action(braid, USER, sid, "send_message", text=SLOW)
    with pytest.raises(Busy):  # without `queue`, a busy branch still answers busy
        await call_action(braid, USER, sid, "send_message", text="say refused")
    one = await call_action(braid, USER, sid, "send_message", text="say one", queue=True)
    assert set(one) == {"queued_id"} and len(one["queued_id"]) == 32
    changed = await next_event(events, "queue_changed")
    assert changed["change"] == "added" and [q["text"] for q in changed["queued"]] == ["say one"]
    assert changed["ids"] == [one["queued_id"]]
    two = await call_action(braid, USER, sid, "send_message", text="say two", queue=True)
    listed = await call_action(braid, USER, sid, "list_queue")
    assert [(q["queued_id"], q["text"]) for q in listed["queued"]] == [
        (one["queued_id"], "say one"), (two["queued_id"], "say two")]
    assert all(set(q) == {"queued_id", "text", "created_at"} for q in listed["queued"])
    runs = await wait_runs(braid, sid, 3)
    # In order, each an ordinary turn whose run id is its queued id.
    assert [r["run_id"] for r in runs] == [first["run_id"], one["queued_id"],
                                           two["queued_id"]]
    assert [r["status"] for r in runs] == ["COMPLETED"] * 3
    assert await user_texts(braid, sid, two["queued_id"]) == ["say two"]
    assert (await call_action(braid, USER, sid, "list_queue")) == {"queued": []}
    log = git(path, "log", "--reverse", "--format=%s").splitlines()
    assert log[-2:] == ["Turn: say one", "Turn: say two"]


async def test_queue_on_a_free_branch_just_runs(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    started = await call_action(braid, USER, sid, "send_message", text="say hi", queue=True)
    assert set(started) == {"run_id"}
    runs = await wait_runs(braid, sid, 1)
    assert runs[0]["status"] == "COMPLETED"


async def test_edit_and_remove_while_queued_only(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    events = braid.bus.subscribe(sid)
    await call_action(braid, USER, sid, "send_message", text=SLOW)
    one = await call_action(braid, USER, sid, "send_message", text="say one", queue=True)
    two = await call_action(braid, USER, sid, "send_message", text="say two", queue=True)
    three = await call_action(braid, USER, sid, "send_message", text="say three", queue=True)
    edited = await call_action(braid, USER, sid, "update_queued",
                               queued_id=two["queued_id"], text="say TWO")
    assert edited == {"queued_id": two["queued_id"]}
    removed = await call_action(braid, USER, sid, "cancel_queued", queued_id=one["queued_id"])
    assert removed == {"queued_id": one["queued_id"]}
    told = []
    while True:  # every change is told: what changed, and the ids waiting after it
        changed = await next_event(events, "queue_changed")
        told.append((changed["change"], changed["queued_id"],
                     [q["text"] for q in changed["queued"]]))
        if changed["change"] == "removed":
            assert changed["ids"] == [two["queued_id"], three["queued_id"]]
            break
    assert told[-2:] == [("updated", two["queued_id"], ["say TWO"]),
                         ("removed", one["queued_id"], [])]
    # Removed: nothing to edit or remove any more.
    for name, extra in (("update_queued", {"text": "x"}), ("cancel_queued", {})):
        with pytest.raises(NotFound):
            await call_action(braid, USER, sid, name, queued_id=one["queued_id"], **extra)
    runs = await wait_runs(braid, sid, 3)
    assert [r["run_id"] for r in runs][1:] == [two["queued_id"], three["queued_id"]]
    assert await user_texts(braid, sid, two["queued_id"]) == ["say TWO"]
    # Started: no longer queued, so not found (the id now names a run, not a queued message).
    with pytest.raises(NotFound):
        await call_action(braid, USER, sid, "update_queued", queued_id=two["queued_id"],
                          text="too late")
    with pytest.raises(NotFound):
        await call_action(braid, USER, sid, "cancel_queued", queued_id=three["queued_id"])


async def test_bad_input_and_another_users_queue(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    await call_action(braid, USER, sid, "send_message", text=SLOW)
    one = await call_action(braid, USER, sid, "send_message", text="say one", queue=True)
    with pytest.raises(BadRequest):
        await call_action(braid, USER, sid, "update_queued", queued_id=one["queued_id"],
                          text="")
    with pytest.raises(BadRequest):
        await call_action(braid, USER, sid, "cancel_queued", queued_id=7)
    with pytest.raises(BadRequest):
        await call_action(braid, USER, sid, "send_message", text="x", queue="maybe")
    with pytest.raises(NotFound):
        await call_action(braid, USER, sid, "cancel_queued", queued_id="nope")
    with pytest.raises(NotFound):
        await call_action(braid, USER, sid, "cancel_queued", queued_id="0" * 32)
    for name, raw in (("list_queue", {}), ("cancel_queued", {"queued_id": one["queued_id"]}),
                      ("update_queued", {"queued_id": one["queued_id"], "text": "mine"}),
                      ("send_message", {"text": "say x", "queue": True})):
        with pytest.raises(NotFound):
            await call_action(braid, "someone-else", sid, name, **raw)
    # Another session of the same user does not reach this one's queue either.
    other, _ = await new_session(braid)
    with pytest.raises(NotFound):
        await call_action(braid, USER, other, "cancel_queued", queued_id=one["queued_id"])
    assert [q["text"] for q in (await call_action(braid, USER, sid, "list_queue"))["queued"]] \
        == ["say one"]
    await wait_runs(braid, sid, 2)


async def test_a_deleted_session_starts_nothing_of_its_queue(braid: Braid) -> None:
    from server.features import session_meta

    sid, _ = await new_session(braid)
    run = await call_action(braid, USER, sid, "send_message", text=SLOW)
    await call_action(braid, USER, sid, "send_message", text="say one", queue=True)
    await session_meta.delete_session(braid, USER, sid)
    await asyncio.sleep(0.3)  # the stopped run's end would have started the next one by now
    assert braid.runs.for_session(sid) == []
    assert await braid.queue.waiting(sid) == []
    assert await braid.index.list_runs(sid) == []
    assert run["run_id"]


async def test_a_users_queue_is_bounded_in_messages_and_bytes(
        make_braid: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past BRAID_USER_QUEUE messages, or the bytes a user may queue, a message is refused
    `too_many` and nothing of it is kept; another user's queue is not counted."""
    monkeypatch.setattr(queue, "USER_QUEUE_BYTES", 1000)
    braid = await make_braid(user_queue=3)
    sid, _ = await new_session(braid)
    other, _ = await new_session(braid, "other")
    await call_action(braid, USER, sid, "send_message", text=SLOW)
    await call_action(braid, "other", other, "send_message", text=SLOW)
    for i in range(3):
        await call_action(braid, USER, sid, "send_message", text=f"say {i}", queue=True)
    with pytest.raises(TooMany) as refused:
        await call_action(braid, USER, sid, "send_message", text="say 3", queue=True)
    assert refused.value.code == "too_many" and "at most 3" in refused.value.message
    assert len((await call_action(braid, USER, sid, "list_queue"))["queued"]) == 3
    # The other user has a share of their own, in bytes too.
    await call_action(braid, "other", other, "send_message", text="x" * 900, queue=True)
    with pytest.raises(TooMany):
        await call_action(braid, "other", other, "send_message", text="y" * 200, queue=True)
    queued = (await call_action(braid, "other", other, "list_queue"))["queued"]
    with pytest.raises(TooMany):  # an edit may not grow past the share either
        await call_action(braid, "other", other, "update_queued",
                          queued_id=queued[0]["queued_id"], text="z" * 1200)
    assert [q["text"] for q in queued] == ["x" * 900]
    assert (await call_action(braid, "other", other, "list_queue"))["queued"] == queued
    # As the queue runs, room comes back.
    await wait_runs(braid, sid, 4)
    added = await call_action(braid, USER, sid, "send_message", text="say again", queue=True)
    assert set(added) in ({"queued_id"}, {"run_id"})
