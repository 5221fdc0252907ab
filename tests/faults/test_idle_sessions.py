"""Idle sessions give back their thread and repository (D14): opening many sessions leaves
at most the bound open, idle ones are released, and a released session reopens on demand
with nothing lost (its deferred index entries written first)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conftest import git, new_session, run_turn


def git_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("git-"))


async def test_idle_sessions_release_their_threads_and_reopen(make_braid: Any) -> None:
    braid = await make_braid(idle_seconds=0.5, open_sessions=4)
    base = git_threads()
    made = []
    for i in range(12):
        sid, path = await new_session(braid)
        await run_turn(braid, sid, f"write f.txt {i}")
        made.append((sid, path))
    deadline = asyncio.get_running_loop().time() + 10
    while git_threads() - base > 0 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    assert git_threads() - base == 0, git_threads()
    assert sum(1 for sid, _ in made if braid.store.get(sid).is_open) == 0
    # Reopened on demand: the next turn works and git tells the truth.
    sid, path = made[0]
    done = await run_turn(braid, sid, "write g.txt again")
    assert done["status"] == "COMPLETED"
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "show", "HEAD:workdir/f.txt") == "0\n"


async def test_at_most_the_bound_stays_open(make_braid: Any) -> None:
    braid = await make_braid(idle_seconds=3600, open_sessions=3)
    for i in range(8):
        sid, _ = await new_session(braid)
        await run_turn(braid, sid, f"write f.txt {i}")
    braid.store.release_idle(3600, 3)
    assert sum(1 for sid in braid.store.all_ids() if braid.store.get(sid).is_open) <= 3
