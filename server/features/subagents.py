"""Sub-agents (DESIGN §4 "Sub-agents"): a turn run on its own branch in its own git worktree.

`spawn_sub_agent` branches `sub_<parent_turn_id[:10]>_<label>_<hex8>` from the parent's current
state with a first `sub-agent` commit that drops `history/` and `runs/` (the child starts a
fresh conversation holding only its prompt), checks it out under `_worktrees/<branch>/`, and
runs an ordinary turn there (turns.launch/drive) through a `SessionHandle` opened on the
worktree: its own GitSession on its own worker thread, so several sub-agents and the parent
work at the same time. The sub-agent holds its own branch (locks.py), never the parent's.
When the turn ends, its answer is written into the parent branch as an assistant message
naming the branch and commit, the worktree is removed (folder included) and the branch kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.interrupted import prune_worktrees, recover_worktree
from server.agent.live_runs import ActiveRun, claim_turn
from server.agent.orchestrate import make_sub_branch
from server.agent.turn_changes import files_of
from server.agent.turn_context import (
    TurnContext,
    open_turn,
    resume_in_place,
    snapshot_user_edits,
    write_pending_to_disk,
)
from server.agent.turns import launch
from server.base import crash, events
from server.base.errors import NotFound, TooMany
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    RunFields,
    SpawnChild,
    new_message,
    new_run,
    to_json_bytes,
)
from server.base.results import SubAgentResult, SubAgentSummary
from server.git import lookup
from server.git.branches import clean_label, sub_branch
from server.git.session import WORKTREES, GitSession
from server.git.workdir.scan import WORKDIR
from server.store import journal, layout
from server.store.checkpoints import locate_run
from server.store.layout import answer_of
from server.store.search import run_rows
from server.store.session_store import SessionHandle

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.subagents")
RESULT_CHARS = 2000
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
            result["commit_id"] = await handle.call(lambda git: _close_worktree(git, branch))
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


def _close_worktree(git: GitSession, branch: str) -> str:
    git.remove_worktree(branch)
    return str(git.branch_tip(branch))


# -- children the model spawns (agent/orchestrate.py drives them) -------------------------


def add_child_worktree(git: GitSession, branch: str) -> Path:
    """On the session's own thread: the child's branch checked out under `_worktrees/` (one a
    dead process left is recovered first: its files committed, nothing lost)."""
    if branch in git.repo.list_worktrees():
        recover_worktree(git, branch)
    path = git.path / WORKTREES / branch
    path.parent.mkdir(exist_ok=True)
    ref = lookup.reference(git.repo, f"refs/heads/{branch}")
    if ref is None:
        raise NotFound(f"no branch {branch}")
    git.repo.add_worktree(branch, str(path), ref)
    (path / WORKDIR).mkdir(exist_ok=True)  # git keeps no empty folders
    return path


def resume_child_turn(git: GitSession, handle: SessionHandle, run_id: str) -> TurnContext:
    """On the child's worktree: its INTERRUPTED run going on in place, as `continue_run`
    resumes one (its messages kept, its record RUNNING again)."""
    view = locate_run(git, run_id)
    ctx = resume_in_place(git, handle, view, len(view.messages))
    write_pending_to_disk(git, ctx)
    return ctx


async def run_model_child(braid: Services, parent: SessionHandle, child: SpawnChild,
                          fields: RunFields, started: Callable[[str], Awaitable[None]]
                          ) -> SpawnChild:
    """Run one child the model spawned to its end, on its branch (made already) in its own
    worktree: a fresh turn holding only its prompt, or its INTERRUPTED run resumed (a
    `run_id` in `child`). Its result goes back to the caller (the parent's tool call), not
    into the parent's history. `started(run_id)` is awaited once the child's run exists."""
    sid, branch = parent.session_id, child["branch"]
    root = braid.store.get(sid)
    info = fields.get("sub_agent") or {}
    handle: SessionHandle | None = None
    in_use = braid.runs.worktrees(sid)
    in_use.add(branch)  # before the worktree is made: no spawn prunes it from now on
    async with claim_turn(braid.locks, braid.runs, sid, branch) as active:
        try:
            path = await root.call(lambda git: add_child_worktree(git, branch))
            handle = SessionHandle(sid, path)
            resume = child.get("run_id")
            made = handle
            ctx = await handle.call(
                (lambda git: resume_child_turn(git, made, resume)) if resume
                else (lambda git: open_turn(git, made, child["prompt"], fields, fresh=True)))
            braid.bus.publish(sid, events.sub_agent_started(
                ctx.run_id, branch, child["label"], child["prompt"],
                str(info.get("parent_turn_id")), str(info.get("parent_branch")),
                spawn={"parent_run_id": fields.get("parent_run_id"),
                       "call_id": info.get("call_id"), "depth": info.get("depth"),
                       "resumed": bool(resume)}))
            await launch(braid, handle, ctx, active)
        except BaseException:
            if handle is not None:
                handle.close()
            try:
                await root.call(lambda git: git.remove_worktree(branch))
            finally:
                braid.runs.worktree_done(sid, branch)
            raise
    # Journaled while the child's first model call goes out (a kill before this: the resumed
    # spawn finds the run by its branch, orchestrate.py).
    await started(ctx.run_id)
    await active.done.wait()
    await braid.mcp.stop_workdir(handle.path / WORKDIR)  # its MCP servers end with it
    await handle.call(lambda git: None)  # after the turn's last index flush
    handle.close()
    out: SpawnChild = {**child, "run_id": ctx.run_id, "status": str(ctx.run["status"]),
                       "final_text": answer_of(ctx.messages)[:RESULT_CHARS],
                       "error": ctx.run.get("error"), "usage": {**ctx.run.get("usage", {})}}
    try:
        try:  # the worktree goes at once; the branch stays (DESIGN §4 "Sub-agents")
            out["commit_id"] = await root.call(lambda git: _close_worktree(git, branch))
        finally:
            braid.runs.worktree_done(sid, branch)
        out["files"] = await root.call(lambda git: files_of(git, ctx.run_id, branch))
    except RuntimeError:  # the session's thread is gone: the server is stopping
        log.warning("sub-agent %s ended while the server stopped", branch)
        return out
    braid.bus.publish(sid, events.sub_agent_done(
        {"branch": branch, "label": child["label"], "run_id": ctx.run_id,
         "status": out["status"], "final_text": out["final_text"], "error": out["error"],
         "commit_id": out.get("commit_id"), "parent_branch": str(info.get("parent_branch")),
         "parent_turn_id": str(info.get("parent_turn_id")), "files": out.get("files") or []},
        spawn={"parent_run_id": fields.get("parent_run_id"), "call_id": info.get("call_id"),
               "depth": info.get("depth"), "resumed": bool(resume)},
        usage=out["usage"]))
    braid.bus.publish(sid, events.dag_changed(branch=branch))
    return out
