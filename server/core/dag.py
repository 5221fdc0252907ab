"""The DAG view (DESIGN §8): the commit graph as lanes and rows, ready to draw as SVG.

`graph()` is the data (`get_dag`): every commit reachable from a branch, newest first, with its
parents, kind, run, owning branch and label; sub-agent branches carry their result. `layout()`
turns it into what the panel draws. To stay quick and legible with thousands of commits it
folds a turn's tool-batch checkpoints into the turn's own node (`folded` counts them), shows
at most `rows` nodes (the page asks for more), and lets branches share a lane when their spans
do not overlap, so a session with a hundred finished sub-agents is still a few lanes wide.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pygit2

from .errors import BadRequest
from .git_session import GitSession, commit_info
from .sessions import transcript_at
from .subagents import is_sub_branch, last_answer, short_name

if TYPE_CHECKING:
    from .braid import Braid

DAG_LIMIT = 5000
ROWS = 200
MAX_ROWS = DAG_LIMIT
ROW_H = 30
LANE_W = 16
PAD = 12
FILES_LIMIT = 300
MAIN_COLOR = "#4f46e5"
PALETTE = ("#0e9f6e", "#d97706", "#db2777", "#0891b2", "#7c3aed", "#65a30d", "#dc2626",
           "#2563eb", "#ca8a04", "#9333ea")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def commit_graph(git: GitSession, limit: int) -> dict[str, Any]:
    """Every commit reachable from a branch, newest first, each with the branch it belongs
    to (the first branch, main first, whose first-parent chain reaches it)."""
    branches = git.branches()
    tips_by_oid: dict[str, list[str]] = {}
    for name, oid in branches.items():
        tips_by_oid.setdefault(oid, []).append(name)
    sort = pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME
    walker = git.repo.walk(None, sort)
    for oid in branches.values():
        walker.push(pygit2.Oid(hex=oid))
    # Which branch a commit belongs to: the first branch (main first) whose first-parent
    # chain reaches it.
    owner: dict[str, str] = {}
    order = sorted(branches, key=lambda n: (n != "main", n))
    for name in order:
        commit = git.commit(branches[name])
        while str(commit.id) not in owner:
            owner[str(commit.id)] = name
            if not commit.parents:
                break
            commit = commit.parents[0]
    nodes = []
    for commit in walker:
        if len(nodes) >= limit:
            break
        info = commit_info(commit)
        node = info.as_dict()
        node["branch"] = owner.get(info.id, "")
        node["label"] = info.summary
        node["tips"] = tips_by_oid.get(info.id, [])
        nodes.append(node)
    return {"nodes": nodes, "branches": [{"name": n, "head": h} for n, h in
                                         sorted(branches.items())],
            "head": str(git.head_oid()), "current_branch": git.branch}


def graph(git: GitSession, limit: int = DAG_LIMIT,
          cache: dict[str, Any] | None = None) -> dict[str, Any]:
    """The commit graph; a sub-agent branch's tip is labelled with the sub-agent's result.

    The graph is a function of the branch tips (and HEAD): two tabs, or a dag_changed that
    changed nothing, reuse one walk. `cache` is the session's own (`SessionHandle.caches`,
    used on its thread only): the last key and its data."""
    key = (tuple(sorted(git.branches().items())), git.branch, str(git.head_oid()), limit)
    hit = cache.get("dag") if cache is not None else None
    if hit is not None and hit[0] == key:
        return dict(hit[1])
    data = _build(git, limit)
    if cache is not None:
        cache["dag"] = (key, data)
    return dict(data)


def _build(git: GitSession, limit: int) -> dict[str, Any]:
    data = commit_graph(git, limit)
    results: dict[str, str] = {}
    for branch in data["branches"]:
        if is_sub_branch(branch["name"]):
            result = last_answer(git, git.commit(branch["head"]))
            branch["result"] = results[branch["head"]] = " ".join(result.split())[:200]
            branch["sub_agent"] = True
    branch_of = {n["id"]: n["branch"] for n in data["nodes"]}
    for node in data["nodes"]:
        if node["id"] in results and any(is_sub_branch(t) for t in node["tips"]):
            node["label"] = results[node["id"]] or node["label"]
        elif node["kind"] == "merge" and len(node["parent_ids"]) > 1:
            names = [short_name(branch_of.get(p) or p[:10]) for p in node["parent_ids"][1:]]
            node["label"] = "Merge " + ", ".join(names)
    return data


async def get_dag(braid: Braid, user_id: str, session_id: object) -> dict[str, Any]:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: graph(git, cache=handle.caches))




@dataclass
class Dot:
    node: dict[str, Any]
    row: int
    lane: int
    x: int
    y: int
    color: str
    folded: int = 0


@dataclass
class Edge:
    child_id: str
    parent_id: str
    d: str
    color: str


@dataclass
class Layout:
    dots: list[Dot]
    edges: list[Edge]
    branches: list[dict[str, Any]]
    width: int
    height: int
    rows: int
    total: int
    more: bool
    head: str
    current_branch: str
    lanes: int = 0
    colors: dict[str, str] = field(default_factory=dict)


def _fold(nodes: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, int]]:
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


def layout(data: dict[str, Any], rows: int = ROWS) -> Layout:
    nodes = data["nodes"]
    rep, folded = _fold(nodes)
    visible = [n for n in nodes if rep[n["id"]] == n["id"]]
    shown = visible[:rows]
    row_of = {n["id"]: i for i, n in enumerate(shown)}
    bottom = len(shown)  # the row where edges to hidden commits leave the picture
    branch_of = {n["id"]: n["branch"] or "?" for n in shown}

    # Edges between representatives; the long vertical part of an edge runs in the child's
    # lane for a first parent (a fork) and in the parent's lane for a merged branch.
    links: dict[tuple[str, str], bool] = {}
    for n in nodes:
        child = rep[n["id"]]
        if child not in row_of:
            continue
        for i, p in enumerate(n["parent_ids"]):
            parent = rep.get(p, p)
            if parent != child and (child, parent) not in links:
                links[(child, parent)] = i == 0
    spans: dict[str, list[int]] = {}

    def cover(branch: str, a: int, b: int) -> None:
        span = spans.setdefault(branch, [a, b])
        span[0], span[1] = min(span[0], a, b), max(span[1], a, b)

    last_dot: dict[str, int] = {}  # a branch's oldest row shown
    for n in shown:
        cover(branch_of[n["id"]], row_of[n["id"]], row_of[n["id"]])
        last_dot[branch_of[n["id"]]] = row_of[n["id"]]
    for (child, parent), first in links.items():
        parent_row = row_of.get(parent, bottom)
        owner = branch_of[child] if first or parent not in branch_of else branch_of[parent]
        cover(owner, row_of[child], parent_row)

    current = data.get("current_branch") or "main"
    lane_of: dict[str, int] = {}
    ends: list[tuple[int, bool]] = []  # per lane: the last row used, and whether it is a dot
    first_free = 1 if "main" in spans else 0  # main keeps lane 0 to itself
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
    lanes = max(1, len(ends))
    # Colours in lane order, so branches drawn side by side never share one.
    colors = {"main": MAIN_COLOR}
    for name in [*lane_of, *(b["name"] for b in data["branches"])]:
        if name not in colors:
            colors[name] = PALETTE[(len(colors) - 1) % len(PALETTE)]

    def xy(row: int, lane: int) -> tuple[int, int]:
        return PAD + lane * LANE_W, row * ROW_H + ROW_H // 2

    dots = []
    for n in shown:
        branch = branch_of[n["id"]]
        x, y = xy(row_of[n["id"]], lane_of[branch])
        dots.append(Dot(n, row_of[n["id"]], lane_of[branch], x, y, colors[branch],
                        folded.get(n["id"], 0)))
    dot_of = {d.node["id"]: d for d in dots}
    edges = []
    for (child, parent), first in links.items():
        c = dot_of[child]
        p = dot_of.get(parent)
        if p is None:
            lane = c.lane if first or parent not in branch_of else lane_of[branch_of[parent]]
            px, py = xy(bottom, lane)
            py -= ROW_H // 2
            color = c.color
        else:
            px, py, color = p.x, p.y, (c.color if first else p.color)
        edges.append(Edge(child, parent, _path(c.x, c.y, px, py, first), color))

    branches = []
    for b in data["branches"]:
        lane = lane_of.get(b["name"])
        branches.append({**b, "color": colors[b["name"]], "lane": lane,
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


async def get_layout(braid: Braid, user_id: str, session_id: object,
                     rows: object = None) -> Layout:
    """The laid-out graph the panel draws."""
    count = clamp_rows(rows)
    data = await get_dag(braid, user_id, session_id)
    return layout(data, count)


def node_view(git: GitSession, commit_id: str) -> dict[str, Any]:
    """One commit as the panel shows it: the chat and the files at that point. On a sub-agent
    branch the chat is the child's own (its branch holds its own history)."""
    commit = git.commit(commit_id)
    info = commit_info(commit).as_dict()
    files = sorted(git.workdir_files(commit))
    run = None
    if info["run_id"]:
        path = git.find_run_path(info["run_id"], commit)
        run = dict(git.read_json(commit, path)) if path else None
    branches = git.branches()
    on = [name for name, tip in branches.items()
          if tip == commit_id or git.repo.descendant_of(tip, commit_id)]
    return {"commit": info, "transcript": transcript_at(git, commit), "run": run,
            "files": files[:FILES_LIMIT], "files_total": len(files), "branches": sorted(on),
            "tips": sorted(name for name, tip in branches.items() if tip == commit_id)}


async def get_node(braid: Braid, user_id: str, session_id: object,
                   commit_id: object) -> dict[str, Any]:
    handle = braid.store.get_owned(user_id, session_id)
    if not isinstance(commit_id, str) or not _HEX40.match(commit_id):
        raise BadRequest("commit_id must be a 40-hex commit id")
    return await handle.call(lambda git: node_view(git, commit_id))
