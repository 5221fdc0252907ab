"""The DAG's data (DESIGN §8): `graph()` (`get_dag`) is every commit reachable from a
branch, newest first, with its parents, kind, run, owning branch and label; sub-agent
branches carry their result. How it is drawn (lanes, rows, colours) is the web side's view
model, `server/web/render/dag_layout.py`. `node_view` is one commit's chat and files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pygit2

from server.base.results import CommitNode, DagGraph, DagNode, NodeView
from server.features.sessions import transcript_at
from server.git.branches import is_sub, short_name
from server.git.commits import commit_info, first_parent_line
from server.git.session import GitSession
from server.store import layout as repo_layout
from server.store.layout import last_answer

if TYPE_CHECKING:
    from server.agent.services import Services

DAG_LIMIT = 5000
FILES_LIMIT = 300


WALK = pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME


def commit_graph(git: GitSession, limit: int) -> DagGraph:
    """Every commit reachable from a branch, newest first, each with the branch it belongs
    to (the first branch, main first, whose first-parent chain reaches it)."""
    branches = git.branches()
    walker = git.repo.walk(None, WALK)
    for oid in branches.values():
        walker.push(pygit2.Oid(hex=oid))
    return {"nodes": _nodes(git, walker, branches, limit), "branches": [
        {"name": n, "head": h} for n, h in sorted(branches.items())],
        "head": str(git.head_oid()), "current_branch": git.branch}


def _nodes(git: GitSession, walker: pygit2.Walker, branches: dict[str, str],
           limit: int) -> list[DagNode]:
    """The walk's commits as nodes. A commit's own fields are read once per session
    (`GitSession.caches`: commits never change) and main's commits are known from its line
    kept in memory (history.Lines), so a node costs a lookup, not a parse."""
    known: dict[str, CommitNode] = git.caches.setdefault("dag_nodes", {})
    if len(known) > 4 * DAG_LIMIT:
        known.clear()
    owner = _owners(git, branches)
    main_tip = pygit2.Oid(hex=branches["main"]) if "main" in branches else None
    nodes: list[DagNode] = []
    for commit in walker:
        if len(nodes) >= limit:
            break
        key = str(commit.id)
        info = known.get(key)
        if info is None:
            info = known[key] = commit_info(commit).as_dict()
        node = cast(DagNode, dict(info))  # its labels come with the tips (_labelled)
        node["branch"] = owner.get(key) or (
            "main" if main_tip is not None and git.lines.holds(main_tip, commit.id) else "")
        nodes.append(node)
    return nodes


def _owners(git: GitSession, branches: dict[str, str]) -> dict[str, str]:
    """The commits of branches other than main that main's first-parent line does not
    reach, with the first branch (by name) whose line reaches them; main's own commits are
    asked of its line kept in memory."""
    main_tip = pygit2.Oid(hex=branches["main"]) if "main" in branches else None
    owner: dict[str, str] = {}
    for name in sorted(n for n in branches if n != "main"):
        for commit in first_parent_line(git.commit(branches[name])):
            if str(commit.id) in owner or (
                    main_tip is not None and git.lines.holds(main_tip, commit.id)):
                break
            owner[str(commit.id)] = name
    return owner


def graph(git: GitSession, limit: int = DAG_LIMIT) -> DagGraph:
    """The commit graph; a sub-agent branch's tip is labelled with the sub-agent's result.

    The graph is a function of the branch tips (and HEAD): two tabs, or a dag_changed that
    changed nothing, reuse one walk. The cache is the session's own (`GitSession.caches`,
    used by whoever holds the session's repository): the last key and its data. When the
    same branches only moved forward (a turn), the last graph is moved on by walking the
    new commits alone."""
    key = (tuple(sorted(git.branches().items())), git.branch, str(git.head_oid()), limit)
    hit: tuple[Any, DagGraph] | None = git.caches.get("dag")  # (key, graph), this module's
    if hit is not None and hit[0] == key:
        return hit[1].copy()
    data = _moved_on(git, hit, key, limit) if hit is not None else None
    data = _labelled(git, data if data is not None else commit_graph(git, limit))
    git.caches["dag"] = (key, data)
    return data.copy()


def _moved_on(git: GitSession, hit: tuple[Any, DagGraph], key: Any,
              limit: int) -> DagGraph | None:
    """The last graph plus the commits made since, when the branches are the same ones and
    each moved only forward; None otherwise (the graph is walked afresh)."""
    old_key, old = hit
    before, now = dict(old_key[0]), dict(key[0])
    if old_key[3] != limit or before.keys() != now.keys():
        return None
    for name, tip in now.items():
        if tip != before[name] and not git.repo.descendant_of(
                pygit2.Oid(hex=tip), pygit2.Oid(hex=before[name])):
            return None
    walker = git.repo.walk(None, WALK)
    for name, tip in now.items():
        if tip != before[name]:
            walker.push(pygit2.Oid(hex=tip))
    for tip in set(before.values()):
        walker.hide(pygit2.Oid(hex=tip))
    # A branch's line gains only its new commits: the old nodes keep their owners.
    fresh = _nodes(git, walker, now, limit)
    nodes = fresh + [n.copy() for n in old["nodes"][:max(0, limit - len(fresh))]]
    return {"nodes": nodes, "branches": [{"name": n, "head": h} for n, h in sorted(now.items())],
            "head": str(git.head_oid()), "current_branch": git.branch}


def _labelled(git: GitSession, data: DagGraph) -> DagGraph:
    """Tips, labels and sub-agent results: the parts of a node that depend on the tips."""
    tips_by_oid: dict[str, list[str]] = {}
    for branch in data["branches"]:
        tips_by_oid.setdefault(branch["head"], []).append(branch["name"])
    results: dict[str, str] = {}
    for branch in data["branches"]:
        if is_sub(branch["name"]):
            result = last_answer(git, git.commit(branch["head"]))
            branch["result"] = results[branch["head"]] = " ".join(result.split())[:200]
            branch["sub_agent"] = True
    branch_of = {n["id"]: n["branch"] for n in data["nodes"]}
    for node in data["nodes"]:
        node["tips"] = tips_by_oid.get(node["id"], [])
        node["label"] = node["summary"]
        if node["id"] in results and any(is_sub(t) for t in node["tips"]):
            node["label"] = results[node["id"]] or node["label"]
        elif node["kind"] == "merge" and len(node["parent_ids"]) > 1:
            names = [short_name(branch_of.get(p) or p[:10]) for p in node["parent_ids"][1:]]
            node["label"] = "Merge " + ", ".join(names)
    return data


def _build(git: GitSession, limit: int) -> DagGraph:
    """The graph walked afresh (bench/dag.py times it)."""
    return _labelled(git, commit_graph(git, limit))


async def get_dag(braid: Services, user_id: str, session_id: str) -> DagGraph:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: graph(git))




def node_view(git: GitSession, commit_id: str) -> NodeView:
    """One commit as the panel shows it: the chat and the files at that point. On a sub-agent
    branch the chat is the child's own (its branch holds its own history)."""
    commit = git.commit(commit_id)
    info = commit_info(commit).as_dict()
    files = sorted(git.workdir_files(commit))
    run = None
    if info["run_id"]:
        path = repo_layout.find_run_path(git, info["run_id"], commit)
        run = git.read_json(commit, path).copy() if path else None
    branches = git.branches()
    on = [name for name, tip in branches.items()
          if tip == commit_id or git.repo.descendant_of(tip, commit_id)]
    return {"commit": info, "transcript": transcript_at(git, commit), "run": run,
            "files": files[:FILES_LIMIT], "files_total": len(files), "branches": sorted(on),
            "tips": sorted(name for name, tip in branches.items() if tip == commit_id)}


async def get_node(braid: Services, user_id: str, session_id: str,
                   commit_id: str) -> NodeView:
    """One commit of the graph; `commit_id` is a full commit id (`params.full_commit_id`)."""
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: node_view(git, commit_id))
