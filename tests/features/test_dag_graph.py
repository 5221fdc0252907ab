"""The DAG's data (dag.py): a graph moved on by the commits made since the last one (a turn
moves a branch forward) is the graph walked afresh, node for node; new or gone branches walk
afresh."""

from __future__ import annotations

from typing import Any

from conftest import new_session, run_turn
from server.features import dag
from server.features.sessions import checkout
from server.features.timetravel import continue_run_to_end


def _view(data: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {n["id"]: (n["branch"], n["label"], tuple(n["tips"]), n["kind"], n["run_id"],
                      tuple(n["parent_ids"])) for n in data["nodes"]}


def _topological(data: dict[str, Any]) -> bool:
    seen: set[str] = set()
    for node in data["nodes"]:
        if any(p in seen for p in node["parent_ids"]):
            return False  # a parent came before its child
        seen.add(node["id"])
    return True


async def test_a_graph_moved_on_is_the_graph_walked_afresh(braid: Any) -> None:
    sid, _ = await new_session(braid)
    handle = braid.store.get(sid)

    async def check() -> dict[str, Any]:
        def both(git: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            return dag.graph(git), dag._build(git, dag.DAG_LIMIT)

        moved, fresh = await handle.call(both)
        assert _view(moved) == _view(fresh) and _topological(moved)
        assert moved["branches"] == fresh["branches"] and moved["head"] == fresh["head"]
        return moved

    first = await run_turn(braid, sid, "write a.txt one")
    await check()
    for text in ("write b.txt two", "say three"):  # main moves forward: moved on
        await run_turn(braid, sid, text)
        graph = await check()
    assert len(graph["nodes"]) == 1 + 2 + 2 + 1  # session, 2 + 2 checkpoints, a turn
    # A sibling run: a new branch (walked afresh), then turns on it (moved on).
    forked = await continue_run_to_end(braid, "local", sid, first["run_id"], input="say again")
    graph = await check()
    assert any(n["branch"] == forked["branch"] for n in graph["nodes"])
    await run_turn(braid, sid, "write c.txt on the fork")
    await check()
    await checkout(braid, "local", sid, "main")
    await run_turn(braid, sid, "say back on main")
    graph = await check()
    assert graph["current_branch"] == "main"
