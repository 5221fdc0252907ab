"""The DAG layout on hand-made graphs: lanes, folding, edges, the row limit."""

from __future__ import annotations

from typing import Any

from server.core import dag


def node(oid: str, parents: list[str], branch: str, kind: str = "turn", run: str | None = None,
         tips: list[str] | None = None) -> dict[str, Any]:
    return {"id": oid, "parent_ids": parents, "branch": branch, "kind": kind, "run_id": run,
            "label": oid, "summary": oid, "tips": tips or []}


def graph(nodes: list[dict[str, Any]], branches: list[str]) -> dict[str, Any]:
    heads = {b: next(n["id"] for n in nodes if n["branch"] == b) for b in branches}
    return {"nodes": nodes, "branches": [{"name": b, "head": heads[b]} for b in branches],
            "head": nodes[0]["id"], "current_branch": "main"}


def test_branches_side_by_side_get_lanes_and_a_later_one_reuses_a_lane() -> None:
    # Newest first. a and b live at the same time and are merged by m; c comes later.
    nodes = [
        node("c2", ["c1"], "c", tips=["c"]), node("c1", ["m"], "c", kind="sub-agent"),
        node("m", ["t1", "a2", "b2"], "main", kind="merge", tips=["main"]),
        node("a2", ["a1"], "a"), node("b2", ["b1"], "b"),
        node("a1", ["t1"], "a", kind="sub-agent"), node("b1", ["t1"], "b", kind="sub-agent"),
        node("t1", ["t0"], "main", run="r1"), node("t0", [], "main", kind="user-edit"),
    ]
    laid = dag.layout(graph(nodes, ["main", "a", "b", "c"]))
    lane = {d.node["id"]: d.lane for d in laid.dots}
    assert lane["m"] == lane["t1"] == lane["t0"] == 0
    assert lane["a1"] == lane["a2"] != lane["b1"] == lane["b2"]
    assert 0 not in (lane["a1"], lane["b1"])
    assert lane["c1"] in (lane["a1"], lane["b1"])  # c starts after a and b ended
    assert laid.lanes == 3
    colors = {d.node["branch"]: d.color for d in laid.dots}
    assert len({colors["main"], colors["a"], colors["b"]}) == 3
    edges = [e for e in laid.edges if e.child_id == "m"]
    assert sorted(e.parent_id for e in edges) == ["a2", "b2", "t1"]
    assert all(e.d.startswith(f"M{dag.PAD} ") for e in edges)  # all leave the merge dot


def test_a_turns_tool_batches_fold_into_its_turn_and_rows_are_limited() -> None:
    nodes = []
    parent: list[str] = []
    for i in range(10):
        nodes += [node(f"b{i}", parent, "main", "tool-batch", run=f"r{i}")]
        nodes += [node(f"t{i}", [f"b{i}"], "main", "turn", run=f"r{i}")]
        parent = [f"t{i}"]
    nodes.reverse()
    laid = dag.layout(graph(nodes, ["main"]), rows=4)
    assert [d.node["id"] for d in laid.dots] == ["t9", "t8", "t7", "t6"]
    assert all(d.folded == 1 for d in laid.dots)
    assert laid.total == 10 and laid.more and laid.rows == 4
    # The edge out of the last row shown goes to the bottom of the picture.
    bottom = next(e for e in laid.edges if e.child_id == "t6")
    assert bottom.d.endswith(f"V{laid.height}")


def test_a_batch_that_another_branch_starts_from_is_not_folded() -> None:
    nodes = [
        node("s1", ["b0"], "sub", "sub-agent", tips=["sub"]),
        node("t0", ["b0"], "main", "turn", run="r0", tips=["main"]),
        node("b0", [], "main", "tool-batch", run="r0"),
    ]
    laid = dag.layout(graph(nodes, ["main", "sub"]))
    assert [d.node["id"] for d in laid.dots] == ["s1", "t0", "b0"]
