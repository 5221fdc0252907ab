"""Packing at rest (DESIGN §3): an idle session's loose objects are packed in the background,
never on a turn's path, and nothing is lost."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from conftest import assert_fsck, git, new_session, run_turn
from server.git import packing


async def test_an_idle_session_is_packed_and_loses_nothing(make_braid: Any,
                                                            monkeypatch: Any) -> None:
    monkeypatch.setattr(packing, "IDLE_SECONDS", 0.3)
    monkeypatch.setattr(packing, "LOOSE_LIMIT", 20)
    braid = await make_braid()
    sid, path = await new_session(braid)
    for i in range(6):
        await run_turn(braid, sid, f"write f{i}.txt turn {i}")
    git_dir = path / ".git"
    seen = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen.append((packing.loose_objects(git_dir), packing.pack_count(git_dir)))
        if seen[-1][0] < 20 and seen[-1][1] >= 1 and braid.packer.idle(sid):
            break
        await asyncio.sleep(0.1)
    assert seen[-1][0] < 20 and seen[-1][1] >= 1, seen
    assert_fsck(path)
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "show", "HEAD:workdir/f5.txt") == "turn 5\n"
    # The session goes on as before, and a fork hard-links the packs.
    done = await run_turn(braid, sid, "recall")
    assert done["messages"][-1]["content"].split(" | ")[0] == "write f0.txt turn 0"
    from server.features.fork import fork_session

    forked = await fork_session(braid, "local", sid)
    assert_fsck(braid.store.path(forked["session_id"]))
