"""Fair shares of the turn slots (DESIGN §4 "Fair shares and durability", issue 34): a run
waiting for the user's answer holds no slot, and one user's turns take at most
BRAID_USER_TURNS of them, so another user's turn goes on meanwhile. Core objects on a temp
data dir, real git repositories; the loopback load test is tests/web/test_fair_load.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conftest import git, new_session, next_event, run_turn
from server.agent import orchestrate, turns
from server.app.braid import Braid
from server.features import session_meta, sessions
from server.store.users import DEFAULT_USER

USER = DEFAULT_USER
OTHER = "other"
MakeBraid = Callable[..., Awaitable[Braid]]
HOLDER = "slow 1000\n" + "say " + " ".join(f"w{i}" for i in range(30))


async def until(check: Callable[[], bool]) -> None:
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not reached in 30 s")


async def test_a_run_waiting_for_an_answer_holds_no_slot(make_braid: MakeBraid) -> None:
    braid = await make_braid(active_turns=2)
    waiting: list[tuple[str, str, asyncio.Queue[dict[str, Any]]]] = []
    for _ in range(3):  # more unanswered calls than there are slots
        sid, _ = await new_session(braid)
        await session_meta.update_session(braid, USER, sid, {"approvals": "writes"})
        events = braid.bus.subscribe(sid)
        run_id = await turns.send_message(braid, USER, sid, "write a.txt held")
        call = await next_event(events, "approval_needed")
        waiting.append((sid, run_id, events))
        assert call["run_id"] == run_id
    assert braid.turn_gate.driving == 0
    other, path = await new_session(braid, OTHER)
    done = await asyncio.wait_for(run_turn(braid, other, "say hello", OTHER), 30)
    assert done["status"] == "COMPLETED"
    # The waiting calls are still there, and run when answered (each takes a slot again).
    for sid, run_id, events in waiting:
        active = braid.runs.find(sid, run_id)
        assert active is not None and len(active.waiting) == 1
        call_id = next(iter(active.waiting))
        await session_meta.approve_tool_call(braid, USER, sid, run_id, call_id, "approve")
        assert (await next_event(events, "run_completed"))["status"] == "COMPLETED"
        assert git(braid.store.path(sid), "show", "HEAD:workdir/a.txt") == "held\n"
    assert braid.turn_gate.driving == braid.turn_gate.waiting == 0


async def test_one_users_turns_take_their_share_only(make_braid: MakeBraid) -> None:
    braid = await make_braid(active_turns=8, user_turns=2)
    runs = []
    for _ in range(3):
        sid, _ = await new_session(braid)
        runs.append((sid, await turns.send_message(braid, USER, sid, HOLDER)))
    await until(lambda: braid.turn_gate.waiting == 1)
    assert braid.turn_gate.user_driving(USER) == 2
    other, _ = await new_session(braid, OTHER)
    done = await asyncio.wait_for(run_turn(braid, other, "say hello", OTHER), 30)
    assert done["status"] == "COMPLETED"
    # The other user's turn ended while every one of the first user's was still going.
    assert all(braid.runs.find(sid, run_id) is not None for sid, run_id in runs)
    for sid, run_id in runs:
        await turns.cancel_run(braid, USER, sid, run_id)
    await until(lambda: braid.turn_gate.driving == braid.turn_gate.waiting == 0)


async def test_a_stop_while_taking_the_slot_back_gives_none_twice(
        make_braid: MakeBraid) -> None:
    """A run stopped while its answered call waits for a slot again holds nothing after:
    the slots are all free (no double release, no slot lost)."""
    braid = await make_braid(active_turns=1)
    sid, _ = await new_session(braid)
    await session_meta.update_session(braid, USER, sid, {"approvals": "writes"})
    events = braid.bus.subscribe(sid)
    run_id = await turns.send_message(braid, USER, sid, "write a.txt x")
    await next_event(events, "approval_needed")
    busy, _ = await new_session(braid)
    holder = await turns.send_message(braid, USER, busy, HOLDER)
    await until(lambda: braid.turn_gate.driving == 1)
    active = braid.runs.find(sid, run_id)
    assert active is not None
    await session_meta.approve_tool_call(braid, USER, sid, run_id, next(iter(active.waiting)),
                                         "approve")
    await until(lambda: braid.turn_gate.waiting == 1)  # taking its slot back, behind holder
    await turns.cancel_run(braid, USER, sid, run_id)
    await turns.cancel_run(braid, USER, busy, holder)
    await until(lambda: braid.turn_gate.driving == braid.turn_gate.waiting == 0)
    # Exactly one slot: two turns at once, one waits.
    first = await turns.send_message(braid, USER, busy, HOLDER)
    await until(lambda: braid.turn_gate.driving == 1)
    second = await turns.send_message(braid, USER, sid, "say after")
    await until(lambda: braid.turn_gate.waiting == 1)
    await turns.cancel_run(braid, USER, busy, first)
    assert (await next_event(events, "run_completed"))["run_id"] == second


def spawn_result(run: dict[str, Any]) -> str:
    calls = {c["id"]: c["function"]["name"] for m in run["messages"]
             for c in m.get("tool_calls") or ()}
    found = [m["content"] for m in run["messages"] if m["role"] == "tool"
             and calls.get(m.get("tool_call_id")) == "spawn_sub_agents"]
    return str(found[-1])


async def test_sub_agents_past_a_users_share_are_a_tool_result(
        make_braid: MakeBraid, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orchestrate, "MESSAGE_SUBAGENTS", 3)
    braid = await make_braid(user_subagents=2)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "spawn a: say a\nspawn b: say b\nspawn c: say c")
    assert run["status"] == "COMPLETED"
    assert spawn_result(run).startswith("error: too many sub-agents: 0 sub-agent runs of this "
                                        "user are going on (at most 2 at once)")
    assert "sub_" not in git(path, "branch")  # refused before any branch was made
    # Per message: two children (2), then each one's own child: the third fits, the fourth
    # is refused (3 for the message), whichever child asks last.
    braid.settings.user_subagents = 16
    run = await run_turn(braid, sid, "spawn a: spawn x: say x\nspawn b: spawn y: say y")
    assert run["status"] == "COMPLETED"
    children = [await sessions.get_run(braid, USER, sid, a["run_id"]) for a in
                json.loads(spawn_result(run))["agents"]]
    results = sorted(spawn_result(c) for c in children)
    assert results[0].startswith("error: too many sub-agents: 3 sub-agent runs were started "
                                 "for this message already (at most 3)"), results
    assert not results[1].startswith("error:")
    assert braid.runs.children_live == {} and braid.runs.children_started == {}
    assert git(path, "worktree", "list").count("\n") == 1  # finished children's are gone


async def test_the_users_spawn_past_the_share_is_too_many(make_braid: MakeBraid) -> None:
    from server.base.errors import TooMany
    from server.features import subagents

    braid = await make_braid(user_subagents=1)
    sid, _ = await new_session(braid)
    first = await run_turn(braid, sid, "say base")
    events = braid.bus.subscribe(sid)
    run_id = await turns.send_message(braid, USER, sid, "spawn slow: " + HOLDER.replace(
        "\n", "\\n"))
    await next_event(events, "sub_agent_started")
    try:
        await subagents.spawn_sub_agent(braid, USER, sid, first["run_id"], "say no")
    except TooMany as e:
        assert "at most 1 at once" in e.message
    else:
        raise AssertionError("the user's spawn passed the share")
    await turns.cancel_run(braid, USER, sid, run_id)
    await until(lambda: not braid.runs.children_live)
    done = await subagents.spawn_sub_agent(braid, USER, sid, first["run_id"], "say yes")
    assert done["status"] == "COMPLETED"
