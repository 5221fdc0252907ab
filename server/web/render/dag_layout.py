"""The DAG panel's view model: the graph the core publishes (`dag.graph`) laid out in lanes
and rows, with the geometry and colours `_dag.html` draws. Pure: data in, layout out.

To stay quick and legible with thousands of commits it folds a turn's tool-batch checkpoints
into the turn's own node (`folded` counts them), shows at most `rows` nodes (the page asks
for more), and lets branches share a lane when their spans do not overlap, so a session with
a hundred finished sub-agents is still a few lanes wide."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from server.base.errors import BadRequest
from server.base.results import DagBranch, DagGraph, DagNode
from server.features.dag import DAG_LIMIT
from server.git.branches import is_sub

ROWS = 200  # rows shown at first; "Show more" asks for twice as many
MAX_ROWS = DAG_LIMIT
ROW_H = 30
LANE_W = 16
PAD = 12
MAIN_COLOR = "#4f46e5"
HOLLOW_FILL = "#fff"
TIP_COLOR = "#6b7079"  # a tip whose branch is not drawn
DOT_R, MERGE_R = 4.5, 6

PALETTE = ("#0e9f6e", "#d97706", "#db2777", "#0891b2", "#7c3aed", "#65a30d", "#dc2626",
           "#2563eb", "#ca8a04", "#9333ea")

@dataclass
class Dot:
    node: DagNode
    row: int
    lane: int
    x: int
    y: int
    color: str
    folded: int = 0
    # A sub-agent's first commit on its own branch is drawn hollow (where a child starts).
    hollow: bool = False
    kind_label: str = ""
    radius: float = 4.5
    tips: list[tuple[str, str]] = field(default_factory=list)  # (branch, its colour)

    @property
    def fill(self) -> str:
        return HOLLOW_FILL if self.hollow else self.color


@dataclass
class Edge:
    child_id: str
    parent_id: str
    d: str
    color: str


class LaneBranch(DagBranch):
    """A branch as the panel draws it: its colour and lane, and whether it is shown."""

    color: str
    lane: int | None
    current: bool


@dataclass
class Layout:
    dots: list[Dot]
    edges: list[Edge]
    branches: list[LaneBranch]
    width: int
    height: int
    rows: int
    total: int
    more: bool
    head: str
    current_branch: str
    lanes: int = 0
    colors: dict[str, str] = field(default_factory=dict)


def _fold(nodes: list[DagNode]) -> tuple[dict[str, str], dict[str, int]]:
    """Each node's representative: a tool-batch checkpoint folds into the next commit of the
    same run on the same lane when nothing else hangs off it."""
    by_id = {n["id"]: n for n in nodes}
    children: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        for p in n["parent_ids"]:
            if p in by_id:
                children[p].append(n["id"])
    rep: dict[str, str] = {}
    folded: dict[str, int] = defaultdict(int)
    for n in nodes:  # children come before their parents (topological order)
        kids = children.get(n["id"], [])
        if n["kind"] == "tool-batch" and len(kids) == 1 and not n.get("tips"):
            child = by_id[kids[0]]
            if (child["parent_ids"] == [n["id"]] and child["branch"] == n["branch"]
                    and child["run_id"] == n["run_id"]):
                rep[n["id"]] = rep[child["id"]]
                folded[rep[n["id"]]] += 1
                continue
        rep[n["id"]] = n["id"]
    return rep, folded


Links = dict[tuple[str, str], bool]  # (child, parent) -> is the child's first parent


def _links(nodes: list[DagNode], rep: dict[str, str], row_of: dict[str, int]) -> Links:
    """Edges between representatives of the rows shown."""
    links: Links = {}
    for n in nodes:
        child = rep[n["id"]]
        if child not in row_of:
            continue
        for i, p in enumerate(n["parent_ids"]):
            parent = rep.get(p, p)
            if parent != child and (child, parent) not in links:
                links[(child, parent)] = i == 0
    return links


def _spans(shown: list[DagNode], links: Links, row_of: dict[str, int],
           branch_of: dict[str, str], bottom: int
           ) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Each branch's rows, top to bottom (its dots and the edges it carries), and the row
    of its oldest dot shown. The long vertical part of an edge runs in the child's lane for
    a first parent (a fork) and in the parent's lane for a merged branch."""
    spans: dict[str, list[int]] = {}

    def cover(branch: str, a: int, b: int) -> None:
        span = spans.setdefault(branch, [a, b])
        span[0], span[1] = min(span[0], a, b), max(span[1], a, b)

    last_dot: dict[str, int] = {}
    for n in shown:
        cover(branch_of[n["id"]], row_of[n["id"]], row_of[n["id"]])
        last_dot[branch_of[n["id"]]] = row_of[n["id"]]
    for (child, parent), first in links.items():
        parent_row = row_of.get(parent, bottom)
        owner = branch_of[child] if first or parent not in branch_of else branch_of[parent]
        cover(owner, row_of[child], parent_row)
    return spans, last_dot


def _lanes(spans: dict[str, list[int]], last_dot: dict[str, int]) -> tuple[dict[str, int],
                                                                           int]:
    """A lane for each branch (main keeps lane 0 to itself), and how many lanes."""
    lane_of: dict[str, int] = {}
    ends: list[tuple[int, bool]] = []  # per lane: the last row used, and whether it is a dot
    first_free = 1 if "main" in spans else 0
    for name in sorted(spans, key=lambda b: (b != "main", spans[b][0], b)):
        top, end = spans[name]
        # A lane is free again on the row where its last branch curved into another lane's
        # dot (the new branch curves out below it), not on a row holding its own dot.
        lane = next((i for i, (e, dot) in enumerate(ends)
                     if i >= first_free and (e < top or (e == top and not dot))), None)
        if lane is None:
            lane, ends = len(ends), [*ends, (0, False)]
        ends[lane] = (end, last_dot.get(name) == end)
        lane_of[name] = lane
    return lane_of, max(1, len(ends))


def _colors(lane_of: dict[str, int], branches: list[DagBranch]) -> dict[str, str]:
    """Colours in lane order, so branches drawn side by side never share one."""
    colors = {"main": MAIN_COLOR}
    for name in [*lane_of, *(b["name"] for b in branches)]:
        if name not in colors:
            colors[name] = PALETTE[(len(colors) - 1) % len(PALETTE)]
    return colors


def _xy(row: int, lane: int) -> tuple[int, int]:
    return PAD + lane * LANE_W, row * ROW_H + ROW_H // 2


def _dots(shown: list[DagNode], row_of: dict[str, int], branch_of: dict[str, str],
          lane_of: dict[str, int], colors: dict[str, str], folded: dict[str, int]
          ) -> list[Dot]:
    dots = []
    for n in shown:
        branch = branch_of[n["id"]]
        x, y = _xy(row_of[n["id"]], lane_of[branch])
        dots.append(Dot(n, row_of[n["id"]], lane_of[branch], x, y, colors[branch],
                        folded.get(n["id"], 0), hollow=_starts_child(n),
                        kind_label=node_kind(n, n["branch"]),
                        radius=MERGE_R if n["kind"] == "merge" else DOT_R,
                        tips=[(t, colors.get(t, TIP_COLOR)) for t in n.get("tips") or ()]))
    return dots


def _edges(links: Links, dots: list[Dot], branch_of: dict[str, str],
           lane_of: dict[str, int], bottom: int) -> list[Edge]:
    dot_of = {d.node["id"]: d for d in dots}
    edges = []
    for (child, parent), first in links.items():
        c = dot_of[child]
        p = dot_of.get(parent)
        if p is None:  # a parent below the rows shown: the edge leaves at the bottom
            lane = c.lane if first or parent not in branch_of else lane_of[branch_of[parent]]
            px, py = _xy(bottom, lane)
            py -= ROW_H // 2
            color = c.color
        else:
            px, py, color = p.x, p.y, (c.color if first else p.color)
        edges.append(Edge(child, parent, _path(c.x, c.y, px, py, first), color))
    return edges


def layout(data: DagGraph, rows: int = ROWS) -> Layout:
    nodes = data["nodes"]
    rep, folded = _fold(nodes)
    visible = [n for n in nodes if rep[n["id"]] == n["id"]]
    shown = visible[:rows]
    row_of = {n["id"]: i for i, n in enumerate(shown)}
    bottom = len(shown)  # the row where edges to hidden commits leave the picture
    branch_of = {n["id"]: n["branch"] or "?" for n in shown}
    links = _links(nodes, rep, row_of)
    lane_of, lanes = _lanes(*_spans(shown, links, row_of, branch_of, bottom))
    colors = _colors(lane_of, data["branches"])
    dots = _dots(shown, row_of, branch_of, lane_of, colors, folded)
    edges = _edges(links, dots, branch_of, lane_of, bottom)

    current = data.get("current_branch") or "main"
    branches: list[LaneBranch] = []
    for b in data["branches"]:
        branches.append({**b, "color": colors[b["name"]], "lane": lane_of.get(b["name"]),
                         "current": b["name"] == current})
    branches.sort(key=lambda b: (not b["current"], b["name"] != "main",
                                 not b.get("sub_agent"), b["name"]))
    return Layout(dots=dots, edges=edges, branches=branches, width=PAD * 2 + (lanes - 1) *
                  LANE_W, height=max(1, len(shown)) * ROW_H, rows=len(shown),
                  total=len(visible), more=len(visible) > len(shown),
                  head=data.get("head", ""), current_branch=current, lanes=lanes,
                  colors=colors)


def _path(x1: int, y1: int, x2: int, y2: int, first: bool) -> str:
    if x1 == x2:
        return f"M{x1} {y1}V{y2}"
    if first:  # down the child's lane, then into the parent
        bend = max(y1, y2 - ROW_H)
        mid = (bend + y2) / 2
        return f"M{x1} {y1}V{bend}C{x1} {mid} {x2} {mid} {x2} {y2}"
    bend = min(y2, y1 + ROW_H)  # out of the merge into the branch's lane, then down it
    mid = (y1 + bend) / 2
    return f"M{x1} {y1}C{x1} {mid} {x2} {mid} {x2} {bend}V{y2}"


def clamp_rows(rows: object) -> int:
    if rows is None or rows == "":
        return ROWS
    try:
        value = int(str(rows))
    except ValueError as e:
        raise BadRequest("rows must be a number") from e
    return max(1, min(value, MAX_ROWS))


KIND_LABELS = {"tool-batch": "tools", "user-edit": "edit", "unrevert": "redo"}


def node_kind(node: DagNode, branch: str) -> str:
    """A node's kind in a word; a `sub-agent` commit starts a child's branch or carries its
    result back to the parent."""
    kind = str(node.get("kind") or "")
    if kind == "sub-agent":
        return "spawn" if is_sub(str(branch)) else "result"
    return KIND_LABELS.get(kind, kind)


def _starts_child(node: DagNode) -> bool:
    return node.get("kind") == "sub-agent" and is_sub(str(node.get("branch") or ""))
