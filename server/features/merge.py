"""Merging branches back (DESIGN §4 "Merge"): a real multi-parent commit and a merge turn.

libgit2 has no octopus merge, so the branches' `workdir/` trees are merged three-way into the
parent's one at a time, in the order given (git/merge3.py, on the workdir subtrees only: a
child's history never enters the parent). The result is one `merge` commit whose parents are
the parent's HEAD and every branch tip; it is also the first checkpoint of a merge turn, a
normal run (record, messages, `Braid-Run` trailers) whose answer the model writes from the
branches' results, given in a system note that opens the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.agent.live_runs import claim_turn
from server.agent.turn_context import TurnContext, open_turn, snapshot_user_edits
from server.agent.turns import launch
from server.base import crash, events
from server.base.errors import BadRequest, Busy, Conflict
from server.base.records import RunFields, to_json_bytes
from server.base.results import MergeResult
from server.git.branches import branch_words
from server.git.history import HISTORY, RUNS
from server.git.merge3 import MergePlan, plan_merge, workdir_oid
from server.git.session import GitSession
from server.git.trees import empty_tree
from server.store import atomic, journal
from server.store.layout import answer_of, last_answer
from server.store.locks import on_branch

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.store.session_store import SessionHandle

# The merge note's lines for the model only: the page leaves them out (web: note_for_people).
MARKERS_LINE = ("These files hold conflict markers (<<<<<<< ======= >>>>>>>). Resolve each "
                "with your tools, keeping what both sides meant, then answer.")
ANSWER_LINE = "Tell the user what the merged work now holds."
MODEL_LINES = (MARKERS_LINE, ANSWER_LINE)
NOTE_HEAD = "Merge turn: "
MAX_BRANCHES = 16
RESULT_LINE = 300


def merge_note(plan: MergePlan, branches: list[str], strategy: str) -> str:
    """The system note that opens a merge turn (DESIGN §6: `Merge turn` then `- BRANCH: TEXT`
    lines, and for the agent a `Conflicts:` list)."""
    count = f"{len(branches)} branch{'es' if len(branches) != 1 else ''}"
    lines = [f"{NOTE_HEAD}{count} merged into {plan.into} (on conflict: {strategy}). "
             "What each brought:"]
    for name in branches:
        text = " ".join((plan.results.get(name) or "(no answer)").split())[:RESULT_LINE]
        lines.append(f"- {name}: {text}")
    by_hand = sorted({c["path"] for c in plan.conflicts if c["resolved"]})
    paths = sorted({c["path"] for c in plan.conflicts if not c["resolved"]})
    if by_hand:
        lines.append(f"The user resolved these files by hand: {', '.join(by_hand)}.")
    if paths and strategy == "agent":
        lines.append("Conflicts:")
        lines += [f"- {p}" for p in paths]
        lines.append(MARKERS_LINE)
    elif paths:
        lines.append(f"Conflicting files took the {strategy} side: {', '.join(paths)}.")
    lines.append(ANSWER_LINE)
    return "\n".join(lines)


def _start_merge(git: GitSession, handle: SessionHandle, into: str, branches: list[str],
                 strategy: str, message: str, model: str, resolutions: dict[str, str]
                 ) -> tuple[TurnContext, MergePlan, list[str]]:
    """On the session thread, in one go: plan, refuse or write the merge commit. Returns the
    turn, the plan and the merge commit's id and parent ids."""
    for name in branches:
        git.branch_tip(name)  # NotFound before anything is written
    # The user's unsaved edits are "ours": committed first, so the merge cannot clobber them.
    snapshot_user_edits(git)
    plan = plan_merge(git, branches, strategy, resolutions)
    plan.results = {name: last_answer(git, git.commit(tip))
                    for name, tip in zip(branches, plan.tips, strict=True)}
    open_paths = sorted({c["path"] for c in plan.conflicts if not c["resolved"]})
    if open_paths and strategy == "fail":
        raise Conflict(f"the merge conflicts in {', '.join(open_paths)}; nothing was changed",
                       {"conflicts": plan.conflicts})
    head = git.head_commit()
    old_workdir = workdir_oid(head, empty_tree(git.repo).id)
    fields: RunFields = {"model": model, "merge": {
        "branches": branches, "strategy": strategy,
        "conflicts": sorted({c["path"] for c in plan.conflicts}),
        "resolved": sorted({c["path"] for c in plan.conflicts if c["resolved"]})}}
    written, deleted = atomic.merge_paths(git, old_workdir, plan.workdir_oid)
    # All or nothing under kill -9: the intent comes before the turn's files and the merge's.
    with journal.intent(git, "merge", [*written, *deleted, "session.json"],
                        untracked=[HISTORY, RUNS]):
        ctx = open_turn(git, handle, message, fields,
                                notes=(merge_note(plan, branches, strategy),))
        crash.at("merge.after_turn_files")
        changes = atomic.write_workdir(git, plan.workdir_oid, written, deleted)
        crash.at("merge.after_files")
        ctx.run["message_count"] = len(ctx.messages)
        changes.update(ctx.pending)
        changes[ctx.run_file] = to_json_bytes(ctx.run)
        oid = git.write_checkpoint(
            changes, summary=f"Merge {', '.join(branches)} into {into}"[:200], kind="merge",
            run_id=ctx.run_id, message_index=len(ctx.messages), extra_parents=plan.tips)
    ctx.pending.clear()
    return ctx, plan, [str(oid), *(str(p) for p in git.commit(oid).parent_ids)]


async def merge_branches(braid: Services, user_id: str, session_id: str, branches: list[str],
                         message: str = "", strategy: str = "fail",
                         resolutions: dict[str, str] | None = None) -> MergeResult:
    """Merge `branches` into the current branch and run the merge turn to its end.
    `resolutions`: {workdir path: text}, the user's own result for a conflicted file."""
    by_hand = dict(resolutions or {})
    handle = braid.store.get_owned(user_id, session_id)
    sid = handle.session_id
    names, how = list(branches), strategy
    text = message.strip() or f"Merge {', '.join(map(branch_words, branches))}"
    into = await handle.call(lambda git: git.branch)
    if into in names:
        raise BadRequest(f"cannot merge {into} into itself")
    async with claim_turn(braid.locks, braid.runs, sid, into) as active:
        held = await braid.locks.held(sid)
        busy = [name for name in names if name in held]
        if busy:
            raise Busy(f"a run is going on on branch {busy[0]}")
        ctx, plan, (commit_id, *parent_ids) = await handle.call(on_branch(
            into, lambda git: _start_merge(git, handle, into, names, how, text,
                                           braid.model.model, by_hand)))
        braid.bus.publish(sid, events.checkpoint(ctx.run_id, commit_id, "merge"))
        braid.bus.publish(sid, events.merged(ctx.run_id, commit_id, parent_ids, names, how,
                                             conflicts=plan.conflicts))
        braid.bus.publish(sid, events.dag_changed(run_id=ctx.run_id))
        await launch(braid, handle, ctx, active)
    await active.done.wait()
    await handle.call(lambda git: None)  # after the turn's last index flush
    return {"commit_id": commit_id, "parent_ids": parent_ids,
            "final_text": answer_of(ctx.messages), "conflicts": plan.conflicts,
            "run_id": ctx.run_id, "status": ctx.run["status"], "branches": names,
            "strategy": how}
