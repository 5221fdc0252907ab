"""The tokens a branch's turns used (model_choice.session_usage): every run record's usage
added up, each record read once (layout.run_usages keeps them by blob), still true after
more turns and on another branch."""

from __future__ import annotations

import json
from typing import Any

from conftest import git, new_session, run_turn
from server.features.model_choice import session_usage
from server.features.sessions import checkout


def _from_git(path: Any) -> dict[str, int]:
    total = {"prompt_tokens": 0, "completion_tokens": 0}
    for name in git(path, "ls-tree", "-r", "--name-only", "HEAD", "runs/").split():
        usage = json.loads(git(path, "show", f"HEAD:{name}")).get("usage") or {}
        for key in total:
            total[key] += int(usage.get(key) or 0)
    return total


async def test_the_branch_s_usage_is_every_record_s_usage(braid: Any) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "say one")
    first = await session_usage(braid, "local", sid)
    assert first["prompt_tokens"] > 0
    for text in ("write a.txt two", "say three four five"):
        await run_turn(braid, sid, text)
    usage = await session_usage(braid, "local", sid)
    expect = _from_git(path)
    assert {k: usage[k] for k in expect} == expect
    assert usage["total_tokens"] == expect["prompt_tokens"] + expect["completion_tokens"]
    assert usage["prompt_tokens"] > first["prompt_tokens"]
    # Another branch shows its own turns' tokens.
    braid_git = braid.store.get(sid)
    await braid_git.call(lambda g: g.create_branch("other", g.head_oid()))
    await checkout(braid, "local", sid, "other")
    await run_turn(braid, sid, "say on the other branch")
    other = await session_usage(braid, "local", sid)
    assert {k: other[k] for k in expect} == _from_git(path) != expect
