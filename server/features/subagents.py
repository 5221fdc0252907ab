"""Sub-agents (DESIGN §4 "Sub-agents"): a turn run on its own branch in its own git worktree.

`spawn_sub_agent` branches `sub_<parent_turn_id[:10]>_<label>_<hex8>` from the parent's current
state with a first `sub-agent` commit that drops `history/` and `runs/` (the child starts a
fresh conversation holding only its prompt), checks it out under `_worktrees/<branch>/`, and
runs an ordinary turn there (turns.launch/drive) through a `SessionHandle` opened on the
worktree: its own GitSession on its own worker thread, so several sub-agents and the parent
work at the same time. The sub-agent holds its own branch (locks.py), never the parent's.
When the turn ends, its answer is written into the parent branch as an assistant message
naming the branch and commit, the worktree is removed (folder included) and the branch kept:
readable in the graph until the user removes it (`remove_sub_branch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.interrupted import prune_worktrees, recover_worktree
from server.agent.live_runs import ActiveRun, claim_turn
from server.agent.orchestrate import RESULT_CHARS, close_worktree, make_sub_branch
from server.agent.turn_changes import files_of
from server.agent.turn_context import (
    TurnContext,
    open_turn,
    snapshot_user_edits,
)
from server.agent.turns import launch
from server.base import crash, events
from server.base.errors import BadRequest, Busy, Conflict, NotFound, TooMany
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    RunFields,
    new_message,
    new_run,
    to_json_bytes,
)
from server.base.results import RemovedBranch, SubAgentResult, SubAgentSummary
from server.git import lookup
from server.git.branches import clean_label, is_sub, sub_branch
from server.git.session import WORKTREES, GitSession
from server.git.workdir.scan import WORKDIR
from server.store import journal, layout
from server.store.layout import answer_of
from server.store.search import run_rows
from server.store.session_store import SessionHandle

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.subagents")
_FINISHING: set[asyncio.Task[SubAgentResult]] = set()


@dataclass(frozen=True)
class SubBranch:
    branch: str
    path: Path
    parent_branch: str
    base_commit_id: str


def open_sub_branch(git: GitSession, branch: str, label: str, prompt: str,
                    snapshot: bool, live: set[str],
                    in_use: AbstractSet[str] = frozenset()) -> SubBranch:
    """On the parent's thread: snapshot user edits, write the `sub-agent` commit (the parent's
    state without history/ and runs/) on a new branch, and check it out as a worktree.
    Worktrees a dead server left are pruned first: not those of live runs (`live`) nor any
    in use (`in_use`, read now: a model's child may have made one since `live` was read)."""
    prune_worktrees(git, keep=live | frozenset(in_use))
    if snapshot:
        snapshot_user_edits(git)
    parent_branch = git.branch
    head = git.head_commit()
    make_sub_branch(git, branch, label, prompt)
    path = git.path / WORKTREES / branch
    path.parent.mkdir(exist_ok=True)
    ref = lookup.reference(git.repo, f"refs/heads/{branch}")
    assert ref is not None  # made just above
    git.repo.add_worktree(branch, str(path), ref)
    crash.at("subagent.after_worktree")
    (path / WORKDIR).mkdir(exist_ok=True)  # git keeps no empty folders
    return SubBranch(branch, path, parent_branch, str(head.id))


def write_result(git: GitSession, parent_branch: str, session_id: str, parent_turn_id: str,
                 info: SubAgentResult) -> SubAgentSummary:
    """The sub-agent's result as an assistant message on the parent branch: its own small
    COMPLETED run (a record, one message, a `sub-agent` commit) so it reverts, continues and
    reindexes like any turn."""
    tip = git.commit(git.branch_tip(parent_branch))
    run_id = new_message_id()
    label = info["label"]
    if info["status"] == "COMPLETED":
        head = f"Sub-agent **{label}** finished"
    else:
        head = f"Sub-agent **{label}** stopped ({info['status'].lower()})"
    answer = info["final_text"] or (f"Error: {info['error']}" if info.get("error")
                                    else "(no answer)")
    text = f"{head} on branch `{info['branch']}` at commit `{info['commit_id']}`:\n\n{answer}"
    msg = new_message("assistant", run_id, text, sub_agent={
        "branch": info["branch"], "commit_id": info["commit_id"], "run_id": info["run_id"],
        "status": info["status"], "final_text": info["final_text"], "label": info["label"],
        "files": info.get("files") or []})
    msg["id"] = run_id
    now = now_iso()
    run = new_run(run_id, session_id, parent_branch, status="COMPLETED", created_at=now,
                  message_count=1, parent_run_id=parent_turn_id)
    run["kind"], run["sub_agent"] = "sub-agent-result", msg["sub_agent"]
    changes = {
        layout.next_message_path(git, "assistant", run_id, tip): to_json_bytes(msg),
        layout.new_run_path(git, run_id, tip): to_json_bytes(run),
    }
    # Through the working tree when the parent branch is checked out: journaled.
    guard = journal.intent(git, "sub-agent", changes) if git.branch == parent_branch \
        else contextlib.nullcontext()
    with guard:
        commit_id = str(git.commit_on_branch(parent_branch, changes,
                                             summary=f"Sub-agent result: {label}",
                                             kind="sub-agent", run_id=run_id,
                                             message_index=1))
    return {"run_id": run_id, "run": run, "message": msg, "commit_id": commit_id}


@dataclass
class _Spawn:
    braid: Services
    parent: SessionHandle
    parent_turn_id: str
    label: str
    sub: SubBranch
    child: SessionHandle


async def spawn_sub_agent(braid: Services, user_id: str, session_id: str,
                          parent_turn_id: str, prompt: str,
                          label: str | None = None) -> SubAgentResult:
    """Run a sub-agent to the end; returns `{branch, final_text, commit_id, ...}`."""
    handle = braid.store.get_owned(user_id, session_id)
    sid = handle.session_id
    if not any(r["run_id"] == parent_turn_id for r in await braid.index.list_runs(sid)):
        raise NotFound(f"no turn {parent_turn_id}")
    name = clean_label(label)
    branch = sub_branch(parent_turn_id, name)
    sub: SubBranch | None = None
    child: SessionHandle | None = None
    refused = braid.runs.take_children(handle.user_id, "", 1, braid.settings.user_subagents, 0)
    if refused:
        raise TooMany(f"too many sub-agents: {refused}")
    in_use = braid.runs.worktrees(sid)
    in_use.add(branch)
    try:
        async with claim_turn(braid.locks, braid.runs, sid, branch) as active:
            try:
                live = await braid.locks.held(sid)
                parent_branch = await handle.call(lambda git: git.branch)
                # Never snapshot under a live turn: its tools' files would pass for user
                # edits.
                snapshot = parent_branch not in live
                sub = await handle.call(lambda git: open_sub_branch(
                    git, branch, name, prompt, snapshot, live, in_use))
                braid.bus.publish(sid, events.dag_changed(branch=branch))
                child = SessionHandle(sid, sub.path)
                fields: RunFields = {"parent_run_id": parent_turn_id, "sub_agent": {
                    "branch": branch, "label": name, "parent_branch": sub.parent_branch,
                    "parent_turn_id": parent_turn_id, "base_commit_id": sub.base_commit_id}}
                ctx = await child.call(lambda git: open_turn(git, child, prompt, fields))
                braid.bus.publish(sid, events.sub_agent_started(
                    ctx.run_id, branch, name, prompt, parent_turn_id, sub.parent_branch))
                await launch(braid, child, ctx, active)
            except BaseException:  # the worktree goes too (claim_turn frees the branch)
                if child is not None:
                    child.close()
                if sub is not None:
                    await handle.call(lambda git: git.remove_worktree(branch))
                raise
    except BaseException:
        braid.runs.worktree_done(sid, branch)
        braid.runs.child_ended(handle.user_id)
        raise
    spawn = _Spawn(braid, handle, parent_turn_id, name, sub, child)
    # Shielded: the result is written and the worktree removed even if the caller goes away.
    finishing = asyncio.create_task(_finish(spawn, ctx, active), name=f"sub-{branch}")
    _FINISHING.add(finishing)
    finishing.add_done_callback(_FINISHING.discard)
    return await asyncio.shield(finishing)


async def _finish(spawn: _Spawn, ctx: TurnContext, active: ActiveRun) -> SubAgentResult:
    braid, handle, sub = spawn.braid, spawn.parent, spawn.sub
    sid, branch = handle.session_id, sub.branch
    await active.done.wait()
    await braid.mcp.stop_workdir(spawn.child.path / WORKDIR)  # its MCP servers end with it
    await spawn.child.call(lambda git: None)  # after the turn's last index flush
    spawn.child.close()
    status = str(ctx.run["status"])
    result: SubAgentResult = {
        "branch": branch, "label": spawn.label, "run_id": ctx.run_id, "status": status,
        "final_text": answer_of(ctx.messages)[:RESULT_CHARS], "error": ctx.run.get("error"),
        "commit_id": None, "parent_branch": sub.parent_branch,
        "parent_turn_id": spawn.parent_turn_id}
    try:
        try:
            result["commit_id"] = await handle.call(lambda git: close_worktree(git, branch))
        finally:
            braid.runs.worktree_done(sid, branch)
            braid.runs.child_ended(handle.user_id)
        # What the child changed, as chips on its result in the parent's transcript.
        result["files"] = await handle.call(lambda git: files_of(git, ctx.run_id, branch))
        if status != "INTERRUPTED":  # a stopping server writes nothing more
            # Held (after any turn there): the result must not interleave with a turn's
            # uncommitted messages.
            async with braid.locks.hold(sid, sub.parent_branch, wait=True):
                summary, shown = await handle.call(lambda git: (write_result(
                    git, sub.parent_branch, sid, spawn.parent_turn_id, result), git.branch))
            await braid.search.add(run_rows(sid, summary["run_id"], [summary["message"]]))
            await braid.index.upsert_run(sid, summary["run"])
            result["summary_run_id"] = summary["run_id"]
            result["summary_commit_id"] = summary["commit_id"]
            # `shown_branch`: the parent's transcript shows the result only on that branch.
            braid.bus.publish(sid, events.sub_agent_done(
                result, shown={"summary": summary, "shown_branch": shown}))
            braid.bus.publish(sid, events.dag_changed(branch=branch))
    except RuntimeError:  # the session's thread is gone: the server is stopping
        log.warning("sub-agent %s ended while the server stopped", branch)
    return result


# -- a finished child's branch, removed from the page -------------------------------------


def _delete_sub_branch(git: GitSession, branch: str, run_ids: list[str]) -> list[str]:
    """On the session's thread: delete `branch` (not the one shown) and return those of its
    runs (`run_ids`) that no other branch holds (a merge may have taken them in)."""
    git.branch_tip(branch)  # NotFound when gone
    if git.branch == branch:
        raise Conflict(f"branch {branch} is shown: show another branch before removing it")
    if branch in git.repo.list_worktrees():  # one a dead server left: its files first
        recover_worktree(git, branch)
    git.delete_branch(branch)
    tips = [git.commit(tip) for tip in git.branches().values()]
    return [rid for rid in run_ids
            if not any(layout.find_run_path(git, rid, tip) for tip in tips)]


async def remove_sub_branch(braid: Services, user_id: str, session_id: str,
                            branch: str) -> RemovedBranch:
    """Remove a finished sub-agent's branch: its ref goes, and with it its commits from the
    graph (unless another branch reaches them) and its runs from the index and search. Its
    result on the parent's branch stays. Refused while a run goes on in the session (a
    model's children wait for their turn on branches made already), and for the branch
    shown or one with queued messages."""
    handle = braid.store.get_owned(user_id, session_id)
    sid = handle.session_id
    if not is_sub(branch):
        raise BadRequest(f"{branch} is not a sub-agent's branch")
    if await braid.locks.held(sid) or braid.runs.worktrees(sid):
        raise Busy("a run is going on in this session: remove the branch when it ends")
    if await braid.queue.has_waiting(sid, branch):
        raise Conflict(f"messages are queued on branch {branch}")
    async with braid.locks.hold(sid, branch):
        run_ids = [r["run_id"] for r in await braid.index.list_runs(sid)
                   if r.get("branch") == branch]
        gone = await handle.call(lambda git: _delete_sub_branch(git, branch, run_ids))
        for run_id in gone:
            await braid.index.delete_run(sid, run_id)
        await braid.search.delete_runs(sid, gone)
    braid.bus.publish(sid, events.dag_changed(branch=branch))
    return {"branch": branch, "run_ids": gone}
