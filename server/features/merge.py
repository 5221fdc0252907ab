"""Merging branches back (DESIGN §4 "Merge"): a real multi-parent commit and a merge turn.

libgit2 has no octopus merge, so the branches' `workdir/` trees are merged three-way into the
parent's one at a time, in the order given (git/merge3.py, on the workdir subtrees only: a
child's history never enters the parent). The result is one `merge` commit whose parents are
the parent's HEAD and every branch tip; it is also the first checkpoint of a merge turn, a
normal run (record, messages, `Braid-Run` trailers) whose answer the model writes from the
branches' results, given in a system note that opens the turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import FileMode

from server.agent.live_runs import claim_turn
from server.agent.turn_context import TurnContext, open_turn, snapshot_user_edits
from server.agent.turns import launch
from server.base import crash, events
from server.base.errors import BadRequest, Busy, Conflict
from server.base.records import RunFields, to_json_bytes
from server.base.results import Conflicted, MergeResult, ToolConflict, ToolMerge
from server.git import lookup
from server.git.branches import branch_words
from server.git.commits import first_parent_line
from server.git.history import HISTORY, RUNS
from server.git.merge3 import Clash, Merged, Side, markers, merge, side_text
from server.git.session import GitSession
from server.git.trees import empty_tree
from server.git.workdir.scan import workdir_tree
from server.store import atomic, journal
from server.store.layout import answer_of, last_answer
from server.store.locks import on_branch

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.store.session_store import SessionHandle

STRATEGIES = ("fail", "ours", "theirs", "agent")
# The merge note's lines for the model only: the page leaves them out (web: note_for_people).
MARKERS_LINE = ("These files hold conflict markers (<<<<<<< ======= >>>>>>>). Resolve each "
                "with your tools, keeping what both sides meant, then answer.")
ANSWER_LINE = "Tell the user what the merged work now holds."
MODEL_LINES = (MARKERS_LINE, ANSWER_LINE)
NOTE_HEAD = "Merge turn: "
MAX_BRANCHES = 16
SIDE_CHARS = 20_000
FOLDER_NAMES = 5  # a folder side of a conflict shows this many of its files
RESULT_LINE = 300


@dataclass
class MergePlan:
    """The merged `workdir/` tree and what it took to get there."""

    into: str
    tips: list[pygit2.Oid]
    workdir_oid: pygit2.Oid
    results: dict[str, str]
    conflicts: list[Conflicted] = field(default_factory=list)


def _workdir_tree(git: GitSession, commit: pygit2.Commit | None, empty: pygit2.Oid) -> pygit2.Oid:
    tree = workdir_tree(commit)
    return tree.id if tree is not None else empty


def _editable(git: GitSession, clash: Clash) -> bool:
    """Whether the page may offer the file for editing by hand: every side is UTF-8 text
    shown whole (a side cut at SIDE_CHARS, or bytes, would lose what the editor cannot show)."""
    for entry in (clash.ours, clash.theirs):
        if entry is None:
            continue
        data = lookup.blob_data(git.repo, entry.id)
        if len(data) > SIDE_CHARS or entry.mode == FileMode.LINK:
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _conflict(git: GitSession, clash: Clash, into: str, branch: str,
              resolutions: dict[str, str], before: list[str]) -> Conflicted:
    """One conflicted file as the page and the API show it: both sides (`ours`: the branch
    merged into, with the branches merged before this one; `theirs`: `branch`; a folder where
    the other side has a file: its names), the file with conflict markers to edit by hand,
    and whether the user's resolution settles it."""
    folder = list(clash.folder)
    editable = not folder and _editable(git, clash)
    mine = side_text(git.repo, clash.ours, SIDE_CHARS)
    other = side_text(git.repo, clash.theirs, SIDE_CHARS)
    if folder:
        more = " …" if len(folder) > FOLDER_NAMES else ""
        shown = f"(a folder: {', '.join(folder[:FOLDER_NAMES])}{more})"
        mine, other = (mine, shown) if clash.ours is not None else (shown, other)
    return {"path": clash.path, "ours": mine, "theirs": other,
            "branch": branch, "into": into, "editable": editable,
            "before": before,
            # The editor's start: git's markers, labelled in words for the person editing.
            "merged": markers(git.repo, clash, " + ".join(map(branch_words, [into, *before])),
                              branch_words(branch), SIDE_CHARS).decode("utf-8", "replace")
            if editable else None,
            "resolved": clash.path in resolutions, "resolution": resolutions.get(clash.path)}


def _best_base(git: GitSession, merged: list[pygit2.Oid], tip: pygit2.Oid) -> pygit2.Oid | None:
    # The newest of the merge bases with what is merged so far (HEAD and earlier tips).
    best: pygit2.Oid | None = None
    for oid in merged:
        # None when they share no commit: pygit2's stub types it a plain Oid.
        base: pygit2.Oid | None = git.repo.merge_base(oid, tip)
        if base is not None and (best is None or git.repo.descendant_of(base, best)):
            best = base
    return best


def _settle(git: GitSession, merged: Merged, clash: Clash, strategy: str, into: str,
            branch: str, text: str | None) -> None:
    """One clash the strategy leaves open. The user's own text settles it; a file against a
    folder keeps both (merge3's rule), the folder keeping the name under `agent` and `fail`,
    as git does; `agent` gives any other the file with markers, `fail` goes on with ours so
    that every conflict is listed."""
    if text is not None:
        merged.put(clash, text.encode())
    elif clash.folder_side is not None and strategy not in ("ours", "theirs"):
        merged.take(clash, clash.folder_side)
    elif strategy == "agent" and clash.folder_side is None:
        merged.put(clash, markers(git.repo, clash, into, branch, SIDE_CHARS))
    else:
        merged.take(clash, "theirs" if strategy == "theirs" else "ours")


def plan_merge(git: GitSession, branches: list[str], strategy: str,
               resolutions: dict[str, str] | None = None) -> MergePlan:
    """Merge each branch's workdir/ into HEAD's, in order, in memory (git/merge3.py). Nothing
    is written but blobs and trees (unreferenced objects, harmless), so `fail` changes nothing.
    `resolutions` ({workdir path: text}): the user's own result for a conflicted file, which
    settles that file whatever the strategy (and so `fail` does not refuse for it)."""
    resolutions = resolutions or {}
    repo = git.repo
    empty = empty_tree(repo).id
    head = git.head_commit()
    into = git.branch
    merged = [head.id]
    ours_oid = _workdir_tree(git, head, empty)
    plan = MergePlan(into=into, tips=[], workdir_oid=ours_oid, results={})
    favor: Side | None = "ours" if strategy == "ours" else \
        "theirs" if strategy == "theirs" else None
    for name in branches:
        tip = git.commit(git.branch_tip(name))
        if tip.id == head.id or repo.descendant_of(head.id, tip.id):
            raise BadRequest(f"branch {name} is already merged into {into}")
        base_oid = _best_base(git, merged, tip.id)
        base = _workdir_tree(git, git.commit(base_oid) if base_oid else None, empty)
        theirs = _workdir_tree(git, tip, empty)
        result = merge(repo, base, ours_oid, theirs, favor=favor, labels=(into, name))
        before = branches[:branches.index(name)]  # merged into `ours` ahead of this one
        plan.conflicts += [_conflict(git, clash, into, name, resolutions, before)
                           for clash in result.conflicts]
        settled = set()
        for clash in result.open():
            _settle(git, result, clash, strategy, into, name, resolutions.get(clash.path))
            settled.add(clash.path)
        for clash in result.conflicts:  # a hunk `favor` settled: the user's text still wins
            if clash.path in resolutions and clash.path not in settled:
                result.put(clash, resolutions[clash.path].encode())
        ours_oid = result.tree()
        merged.append(tip.id)
        plan.tips.append(tip.id)
        plan.results[name] = last_answer(git, tip)
    plan.workdir_oid = ours_oid
    stray = sorted(set(resolutions) - {c["path"] for c in plan.conflicts})
    if stray:
        raise BadRequest(f"{', '.join(stray)} has no conflict in this merge: nothing was changed",
                         {"conflicts": plan.conflicts})
    return plan


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
    open_paths = sorted({c["path"] for c in plan.conflicts if not c["resolved"]})
    if open_paths and strategy == "fail":
        raise Conflict(f"the merge conflicts in {', '.join(open_paths)}; nothing was changed",
                       {"conflicts": plan.conflicts})
    head = git.head_commit()
    old_workdir = _workdir_tree(git, head, empty_tree(git.repo).id)
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


# -- the model's `merge_branches` tool (agent/orchestrate.py) ------------------------------


def merge_in_turn(git: GitSession, run_id: str, branches: list[str], strategy: str,
                  message_index: int) -> ToolMerge:
    """On the session thread of a live turn that holds the branch (its own changes committed
    just before): merge `branches` into it as one of the turn's checkpoints, kind `merge`,
    whose parents are HEAD and every branch tip; reverting the turn reverts it. With `fail`
    and conflicts: the conflicts, nothing written. Branches all merged already (a resumed
    call whose merge was made before a kill): that merge again."""
    tips = [git.branch_tip(name) for name in branches]  # NotFound before anything is written
    head = git.head_commit()
    if all(tip == head.id or git.repo.descendant_of(head.id, tip) for tip in tips):
        made = next((c for c in first_parent_line(head)
                     if len(c.parent_ids) > 1 and set(tips) <= set(c.parent_ids)), None)
        if made is not None:
            return {"commit_id": str(made.id), "parent_ids": [str(p) for p in made.parent_ids],
                    "branches": branches, "strategy": strategy, "conflicts": []}
    plan = plan_merge(git, branches, strategy)
    shown: list[ToolConflict] = [{"path": c["path"], "ours": c["ours"], "theirs": c["theirs"],
                                  "branch": c["branch"]} for c in plan.conflicts]
    if plan.conflicts and strategy == "fail":
        return {"commit_id": None, "parent_ids": [], "branches": branches,
                "strategy": strategy, "conflicts": shown}
    old_workdir = _workdir_tree(git, head, empty_tree(git.repo).id)
    written, deleted = atomic.merge_paths(git, old_workdir, plan.workdir_oid)
    with journal.intent(git, "merge", [*written, *deleted]):
        changes = atomic.write_workdir(git, plan.workdir_oid, written, deleted)
        crash.at("merge-tool.after_files")
        oid = git.write_checkpoint(
            changes, summary=f"Merge {', '.join(branches)} into {plan.into}"[:200],
            kind="merge", run_id=run_id, message_index=message_index,
            extra_parents=plan.tips)
    crash.at("merge-tool.after_commit")
    return {"commit_id": str(oid), "parent_ids": [str(p) for p in git.commit(oid).parent_ids],
            "branches": branches, "strategy": strategy, "conflicts": shown}
