"""The DAG's data (DESIGN §8): `graph()` (`get_dag`) is every commit reachable from a
branch, newest first, with its parents, kind, run, owning branch and label; sub-agent
branches carry their result. How it is drawn (lanes, rows, colours) is the web side's view
model, `server/web/dag_layout.py`. `node_view` is one commit's chat and files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pygit2

from . import layout as repo_layout
from .git_session import GitSession, commit_info
from .layout import last_answer
from .sessions import transcript_at
from .subagents import is_sub_branch, short_name

if TYPE_CHECKING:
    from .braid import Braid

DAG_LIMIT = 5000
FILES_LIMIT = 300


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


def graph(git: GitSession, limit: int = DAG_LIMIT) -> dict[str, Any]:
    """The commit graph; a sub-agent branch's tip is labelled with the sub-agent's result.

    The graph is a function of the branch tips (and HEAD): two tabs, or a dag_changed that
    changed nothing, reuse one walk. The cache is the session's own (`GitSession.caches`,
    used by whoever holds the session's repository): the last key and its data."""
    key = (tuple(sorted(git.branches().items())), git.branch, str(git.head_oid()), limit)
    hit = git.caches.get("dag")
    if hit is not None and hit[0] == key:
        return dict(hit[1])
    data = _build(git, limit)
    git.caches["dag"] = (key, data)
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


async def get_dag(braid: Braid, user_id: str, session_id: str) -> dict[str, Any]:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: graph(git))




def node_view(git: GitSession, commit_id: str) -> dict[str, Any]:
    """One commit as the panel shows it: the chat and the files at that point. On a sub-agent
    branch the chat is the child's own (its branch holds its own history)."""
    commit = git.commit(commit_id)
    info = commit_info(commit).as_dict()
    files = sorted(git.workdir_files(commit))
    run = None
    if info["run_id"]:
        path = repo_layout.find_run_path(git, info["run_id"], commit)
        run = dict(git.read_json(commit, path)) if path else None
    branches = git.branches()
    on = [name for name, tip in branches.items()
          if tip == commit_id or git.repo.descendant_of(tip, commit_id)]
    return {"commit": info, "transcript": transcript_at(git, commit), "run": run,
            "files": files[:FILES_LIMIT], "files_total": len(files), "branches": sorted(on),
            "tips": sorted(name for name, tip in branches.items() if tip == commit_id)}


async def get_node(braid: Braid, user_id: str, session_id: str,
                   commit_id: str) -> dict[str, Any]:
    """One commit of the graph; `commit_id` is a full commit id (`params.full_commit_id`)."""
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: node_view(git, commit_id))
