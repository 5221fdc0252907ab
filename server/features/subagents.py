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
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.interrupted import prune_worktrees
from server.agent.live_runs import ActiveRun, claim_turn
from server.agent.turn_changes import files_of
from server.agent.turn_context import TurnContext, open_turn, snapshot_user_edits
from server.agent.turns import launch
from server.base import crash
from server.base.errors import NotFound
from server.base.ids import new_message_id, now_iso
from server.base.records import RunFields, new_message, new_run, to_json_bytes
from server.base.results import EventData, SubAgentResult, SubAgentSummary
from server.git import lookup
from server.git.commits import commit_message
from server.git.history import HISTORY, RUNS
from server.git.session import WORKTREES, GitSession
from server.git.workdir.scan import WORKDIR
from server.store import journal, layout
from server.store.layout import answer_of
from server.store.search import run_rows
from server.store.session_store import SessionHandle

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.subagents")
PREFIX = "sub_"
MAX_LABEL = 24
RESULT_CHARS = 2000
_FINISHING: set[asyncio.Task[SubAgentResult]] = set()


def clean_label(label: str | None) -> str:
    """A label safe inside a branch and a worktree name: no `/`, no `_` (the separator)."""
    if label is None:
        return "agent"
    cleaned = re.sub(r"[^A-Za-z0-9-]+", "-", label).strip("-")[:MAX_LABEL].strip("-")
    return cleaned or "agent"


def is_sub_branch(name: str) -> bool:
    return name.startswith(PREFIX)


def branch_words(branch: str) -> str:
    """A branch as people read it: `sub-agent LABEL` for a sub-agent's, else its name."""
    parts = branch.split("_")
    if branch.startswith(PREFIX) and len(parts) >= 4:
        return f"sub-agent {'_'.join(parts[2:-1])}"
    return branch


def short_name(branch: str) -> str:
    """`sub_<turn>_<label>_<hex8>` reads as `label·hex4`; other names as they are."""
    if branch.startswith(PREFIX):
        parts = branch.split("_")
        if len(parts) >= 4:
            return f"{'_'.join(parts[2:-1])}·{parts[-1][:4]}"
    return branch


@dataclass(frozen=True)
class SubBranch:
    branch: str
    path: Path
    parent_branch: str
    base_commit_id: str


def open_sub_branch(git: GitSession, branch: str, label: str, prompt: str,
                    snapshot: bool, live: set[str]) -> SubBranch:
    """On the parent's thread: snapshot user edits, write the `sub-agent` commit (the parent's
    state without history/ and runs/) on a new branch, and check it out as a worktree."""
    prune_worktrees(git, keep=live)
    if snapshot:
        snapshot_user_edits(git)
    parent_branch = git.branch
    head = git.head_commit()
    tree = lookup.without(git.repo, head.tree, (HISTORY, RUNS)).id
    first_line = prompt.strip().splitlines()[0][:80] if prompt.strip() else ""
    message = commit_message(f"Sub-agent {label}: {first_line}", "sub-agent", None, None)
    oid = git.repo.create_commit(None, git.signature, git.signature, message, tree, [head.id])
    git.create_branch(branch, oid)
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
    branch = f"{PREFIX}{parent_turn_id[:10]}_{name}_{secrets.token_hex(4)}"
    sub: SubBranch | None = None
    child: SessionHandle | None = None
    async with claim_turn(braid.locks, braid.runs, sid, branch) as active:
        try:
            live = await braid.locks.held(sid)
            parent_branch = await handle.call(lambda git: git.branch)
            # Never snapshot under a live turn: its tools' files would pass for user edits.
            snapshot = parent_branch not in live
            sub = await handle.call(
                lambda git: open_sub_branch(git, branch, name, prompt, snapshot, live))
            braid.bus.publish(sid, "dag_changed", {"branch": branch})
            child = SessionHandle(sid, sub.path)
            fields: RunFields = {"parent_run_id": parent_turn_id, "sub_agent": {
                "branch": branch, "label": name, "parent_branch": sub.parent_branch,
                "parent_turn_id": parent_turn_id, "base_commit_id": sub.base_commit_id}}
            ctx = await child.call(lambda git: open_turn(git, child, prompt, fields))
            braid.bus.publish(sid, "sub_agent_started", {
                "run_id": ctx.run_id, "branch": branch, "label": name, "prompt": prompt,
                "parent_turn_id": parent_turn_id, "parent_branch": sub.parent_branch})
            await launch(braid, child, ctx, active)
        except BaseException:  # the worktree goes too (claim_turn frees the branch)
            if child is not None:
                child.close()
            if sub is not None:
                await handle.call(lambda git: git.remove_worktree(branch))
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
    await spawn.child.call(lambda git: None)  # after the turn's last index flush
    spawn.child.close()
    status = str(ctx.run["status"])
    result: SubAgentResult = {
        "branch": branch, "label": spawn.label, "run_id": ctx.run_id, "status": status,
        "final_text": answer_of(ctx.messages)[:RESULT_CHARS], "error": ctx.run.get("error"),
        "commit_id": None, "parent_branch": sub.parent_branch,
        "parent_turn_id": spawn.parent_turn_id}
    try:
        result["commit_id"] = await handle.call(lambda git: _close_worktree(git, branch))
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
            braid.bus.publish(sid, "sub_agent_done", _done_event(result, summary, shown))
            braid.bus.publish(sid, "dag_changed", {"branch": branch})
    except RuntimeError:  # the session's thread is gone: the server is stopping
        log.warning("sub-agent %s ended while the server stopped", branch)
    return result


def _done_event(result: SubAgentResult, summary: SubAgentSummary, shown: str) -> EventData:
    """`sub_agent_done`: the result, the summary written on the parent branch, and the
    branch the parent shows (its transcript shows the result only there)."""
    return {"branch": result["branch"], "label": result["label"], "run_id": result["run_id"],
            "status": result["status"], "final_text": result["final_text"],
            "error": result["error"], "commit_id": result["commit_id"],
            "parent_branch": result["parent_branch"],
            "parent_turn_id": result["parent_turn_id"],
            "summary_run_id": summary["run_id"], "summary_commit_id": summary["commit_id"],
            "summary": summary, "shown_branch": shown, "files": result.get("files") or []}


def _close_worktree(git: GitSession, branch: str) -> str:
    git.remove_worktree(branch)
    return str(git.branch_tip(branch))
