"""update_session and delete_session in the core, on real repositories (checked with git)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import call_action, git, new_session, next_event
from server.agent import turns
from server.base.errors import BadRequest, NotFound
from server.features import session_meta


async def test_a_rename_during_the_first_turn_is_kept(braid: Any) -> None:
    sid, path = await new_session(braid)
    queue = braid.bus.subscribe(sid)
    run_id = await turns.send_message(braid, "local", sid, "slow 80\nsay one two three four")
    await next_event(queue, "message_delta")
    info = await session_meta.update_session(braid, "local", sid, {"title": "Renamed"})
    assert info["title"] == "Renamed"
    await next_event(queue, "run_completed")
    assert json.loads(git(path, "show", "HEAD:session.json"))["title"] == "Renamed"
    assert git(path, "status", "--porcelain") == ""
    assert braid.runs.find(sid, run_id) is None


@pytest.mark.parametrize("params", [{"title": "\u0007bell"}, {"title": "a\u2028b"},
                                    {"archived": 0}, {"model": ""}])
async def test_strict_types(braid: Any, params: dict[str, Any]) -> None:
    sid, _ = await new_session(braid)
    if params == {"model": ""}:  # "" means the default model, like null
        info = await call_action(braid, "local", sid, "update_session", **params)
        assert info["model"] is None
        return
    with pytest.raises(BadRequest):
        await call_action(braid, "local", sid, "update_session", **params)


async def test_delete_then_nothing_answers(braid: Any) -> None:
    sid, path = await new_session(braid)
    await session_meta.delete_session(braid, "local", sid)
    assert not path.exists()
    with pytest.raises(NotFound):
        await session_meta.update_session(braid, "local", sid, {"title": "x"})
    assert await braid.index.list_runs(sid) == []
    await asyncio.sleep(0)
