"""The turn gate (live_runs.TurnGate, BRAID_ACTIVE_TURNS): beyond the bound, a started turn
waits for a slot without streaming, then runs to the end; a turn stopped while it waits ends
CANCELLED at once with its commit, and the session stays usable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conftest import assert_fsck, git, new_session, next_event, run_turn
from server.agent import turns
from server.app.braid import Braid
from server.base.settings import Settings
from server.store.users import DEFAULT_USER

USER = DEFAULT_USER
MakeBraid = Callable[..., Awaitable[Braid]]
# Streams for many seconds unless cancelled: it holds the only slot while the test looks.
HOLDER = "slow 1000\n" + "say " + " ".join(f"w{i}" for i in range(30))


async def until(check: Callable[[], bool]) -> None:
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not reached in 30 s")


def drained(queue: asyncio.Queue[dict[str, Any]]) -> list[str]:
    events = []
    while not queue.empty():
        events.append(queue.get_nowait()["event"])
    return events


async def test_a_queued_turn_waits_for_a_slot_then_completes(make_braid: MakeBraid) -> None:
    braid = await make_braid(active_turns=1)
    first, _ = await new_session(braid)
    second, path = await new_session(braid)
    held = braid.bus.subscribe(first)
    queued = braid.bus.subscribe(second)
    holder = await turns.send_message(braid, USER, first, HOLDER)
    await next_event(held, "message_delta")  # the holder drives
    run_id = await turns.send_message(braid, USER, second, "write q.txt queued")
    await until(lambda: braid.turn_gate.waiting == 1)
    assert braid.turn_gate.driving == 1
    # Started (its run_started sent, its branch held), but nothing streamed yet.
    assert "message_delta" not in drained(queued)
    await turns.cancel_run(braid, USER, first, holder)
    done = await next_event(queued, "run_completed")
    assert done["run_id"] == run_id and done["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/q.txt") == "queued\n"
    assert braid.turn_gate.waiting == braid.turn_gate.driving == 0


@pytest.mark.slow
async def test_a_turn_stopped_while_queued_ends_cancelled(make_braid: MakeBraid) -> None:
    braid = await make_braid(active_turns=1)
    first, _ = await new_session(braid)
    second, path = await new_session(braid)
    held = braid.bus.subscribe(first)
    holder = await turns.send_message(braid, USER, first, HOLDER)
    await next_event(held, "message_delta")
    run_id = await turns.send_message(braid, USER, second, "write never.txt no")
    await until(lambda: braid.turn_gate.waiting == 1)
    result = await turns.cancel_run(braid, USER, second, run_id)  # while the holder drives
    assert result == {"run_id": run_id, "status": "CANCELLED"}
    assert braid.turn_gate.waiting == 0 and braid.turn_gate.driving == 1
    assert git(path, "log", "-1", "--format=%s").startswith("Turn cancelled:")
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)
    await turns.cancel_run(braid, USER, first, holder)
    assert (await run_turn(braid, second, "write after.txt yes"))["status"] == "COMPLETED"


def test_the_bound_is_a_setting() -> None:
    assert Settings.from_env({}).active_turns == Settings().active_turns > 0
    assert Settings.from_env({"BRAID_ACTIVE_TURNS": "3"}).active_turns == 3
    assert Settings.from_env({"BRAID_ACTIVE_TURNS": "0"}).active_turns == 0  # no bound
