"""Every turn ends with run_completed, run_error or run_cancelled, whatever raises inside it:
an exception is injected at each step of the turn (crash points in `raise` mode), and file
names that are not valid UTF-8 (D2) never kill the turn's task."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, new_session, run_turn
from server.agent import turns
from server.agent.tools import Workspace
from server.app.braid import Braid
from server.base import crash
from server.base.crash import TURN_STEPS, CrashPoint
from server.base.errors import BadRequest

ENDS = ("run_completed", "run_error", "run_cancelled")


@pytest.fixture
def armed() -> Iterator[Any]:
    yield crash.arm
    crash.arm(None)


async def end_of_turn(queue: asyncio.Queue[dict[str, Any]], run_id: str) -> dict[str, Any]:
    async def wait() -> dict[str, Any]:
        while True:
            frame = await queue.get()
            if frame["event"] in ENDS and frame["data"]["run_id"] == run_id:
                return frame

    return await asyncio.wait_for(wait(), timeout=20)


@pytest.mark.parametrize("step", TURN_STEPS)
async def test_an_exception_at_each_step_still_ends_the_turn(braid: Braid, armed: Any,
                                                             step: str) -> None:
    sid, path = await new_session(braid)
    queue = braid.bus.subscribe(sid)
    armed(step, "raise")
    try:
        run_id = await turns.send_message(braid, "local", sid, "write a.txt one")
    except CrashPoint:
        assert step == "turn.prepare"  # refused before the turn existed: the caller is told
    else:
        frame = await end_of_turn(queue, run_id)
        assert frame["event"] in ("run_error", "run_completed"), frame
        if step != "turn.finish":
            assert frame["event"] == "run_error" and "injected failure" in frame["data"]["error"]
        # released: the next turn can start
        assert not braid.runs.for_session(sid) and not await braid.locks.held(sid)
    armed(None)
    assert git(path, "status", "--porcelain") == ""
    done = await run_turn(braid, sid, "write b.txt two")
    assert done["status"] == "COMPLETED"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_d2_a_shell_made_name_that_is_not_utf8_is_a_tool_error(make_braid: Any) -> None:
    braid = await make_braid(shell_mode="sandbox")
    sid, path = await new_session(braid)
    done = await run_turn(braid, sid, "shell touch $'bad\\xff.txt' good.txt")
    assert done["status"] == "COMPLETED", done
    tool = next(m for m in done["messages"] if m["role"] == "tool")
    assert tool["is_error"] and "bad\\xff.txt" in tool["content"]
    assert git(path, "show", "HEAD:workdir/good.txt") == ""
    # The user's own bad name never stops the next turns either.
    (path / "workdir").joinpath(os.fsdecode(b"mine\xfe.txt")).write_text("x")
    again = await run_turn(braid, sid, "write c.txt three")
    assert again["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/c.txt") == "three\n"
    assert_fsck(path)


def test_d2_a_tool_path_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    result = ws.execute("write_file", {"path": "bad\udcff.txt", "content": "x"})
    assert result.is_error and "UTF-8" in result.content and "bad\\xff.txt" in result.content
    assert list(tmp_path.iterdir()) == []


async def test_a_lone_surrogate_or_nul_in_text_is_bad_request(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    for text in ("hi \udcff", "hi \0 there"):
        with pytest.raises(BadRequest):
            await call_action(braid, "local", sid, "send_message", text=text)
