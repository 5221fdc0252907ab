"""The DAG layout (the web view model) on hand-made graphs: lanes, folding, edges, the row
limit, and what each dot is drawn as."""

from __future__ import annotations

from typing import Any

from server.web.render import dag_layout


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
    laid = dag_layout.layout(graph(nodes, ["main", "a", "b", "c"]))
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
    assert all(e.d.startswith(f"M{dag_layout.PAD} ") for e in edges)  # all leave the merge dot


def test_a_turns_tool_batches_fold_into_its_turn_and_rows_are_limited() -> None:
    nodes = []
    parent: list[str] = []
    for i in range(10):
        nodes += [node(f"b{i}", parent, "main", "tool-batch", run=f"r{i}")]
        nodes += [node(f"t{i}", [f"b{i}"], "main", "turn", run=f"r{i}")]
        parent = [f"t{i}"]
    nodes.reverse()
    laid = dag_layout.layout(graph(nodes, ["main"]), rows=4)
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
    laid = dag_layout.layout(graph(nodes, ["main", "sub"]))
    assert [d.node["id"] for d in laid.dots] == ["s1", "t0", "b0"]


def test_each_dot_carries_what_the_template_draws() -> None:
    sub = "sub_0123456789_alpha_0badcafe"
    nodes = [
        node("m1", ["t0", "s2"], "main", "merge", tips=["main"]),
        node("s2", ["s1"], sub, "turn", tips=[sub]),
        node("s1", ["t0"], sub, "sub-agent"),
        node("r1", ["t0"], "main", "sub-agent"),
        node("t0", [], "main", "tool-batch", tips=["gone"]),
    ]
    laid = dag_layout.layout(graph(nodes, ["main", sub]))
    by_id = {d.node["id"]: d for d in laid.dots}
    # A sub-agent commit on its own branch starts the child: hollow, "spawn"; on the
    # parent it is the result coming back, filled.
    assert by_id["s1"].hollow and by_id["s1"].fill == dag_layout.HOLLOW_FILL
    assert by_id["s1"].kind_label == "spawn"
    assert not by_id["r1"].hollow and by_id["r1"].fill == by_id["r1"].color
    assert by_id["r1"].kind_label == "result"
    assert by_id["t0"].kind_label == "tools"
    assert by_id["m1"].radius == dag_layout.MERGE_R and by_id["s2"].radius == dag_layout.DOT_R
    # Tips in their branch's colour; a branch not drawn gets the neutral one.
    assert by_id["s2"].tips == [(sub, laid.colors[sub])]
    assert by_id["t0"].tips == [("gone", dag_layout.TIP_COLOR)]
