"""Time travel (DESIGN §4 "Continue / fork a run"): continue a run from any message, in place
or as a sibling run on its own branch `run/<run_id>` that starts from the checkpoint at that
message, files included; and the timeline of points a run can be continued from.

With `keep_files` (rewind the conversation only) the fork's commit holds the source branch's
current files instead of the checkpoint's: the `workdir/` of the source run's branch tip, with
the user's unsaved edits committed first when that branch is the one checked out.
`rewind_files` is the other axis: one `revert` commit bringing `workdir/` back to a run's
checkpoint at a message, the conversation kept, undone by `unrevert_turn` on the id it returns.

A fork's first commit (kind `fork`) is the source's checkpoint at index K with the source
run's messages and record taken out and copies of its first K messages put in, re-tagged with
the new run id and new ids (the first assistant copy takes the run id itself). So the new run
reads like any run (index K, its record, `GET /api/runs/{id}`) and the model on the branch
sees only that branch's messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import FileMode

from server.agent import orchestrate
from server.agent.live_runs import claim_turn
from server.agent.turn_context import (
    TurnContext,
    add_message,
    resume_in_place,
    sent_once,
    snapshot_user_edits,
    turn_context,
    write_pending_to_disk,
)
from server.agent.turns import launch
from server.base import events
from server.base.errors import BadRequest, Busy, Conflict
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    MessageRecord,
    RewindPoint,
    RunRecord,
    new_message,
    new_run,
    to_json_bytes,
)
from server.base.results import CheckpointList, ContinuedRun, ContinueResult, RevertResult
from server.features.revert import commit_files, exclusive
from server.git.branches import run_branch
from server.git.session import Change, GitSession
from server.git.trees import tree_delta
from server.git.workdir.scan import WORKDIR, workdir_tree
from server.store import atomic, layout
from server.store.checkpoints import (
    RunOnBranch,
    checkpoint_timeline,
    find_checkpoint,
    locate_run,
    resolve_index,
)

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.store.session_store import SessionHandle

RESUMABLE = frozenset({"ERROR", "INTERRUPTED"})


class AlreadyResumed(Conflict):
    """A resume of a run another run already goes on with (a resume at the branch's end:
    the run's record names it, `resumed_by_run_id`): a second would answer the same
    message twice. Nothing changes; a fork or Regenerate still may."""

    code = "already_resumed"

    def __init__(self, run_id: str, resumed_by_run_id: str) -> None:
        super().__init__(f"run {run_id} was already resumed, by run {resumed_by_run_id}: "
                         "its answer goes on there", {"resumed_by_run_id": resumed_by_run_id,
                                                      "turn_id": run_id})


@dataclass(frozen=True)
class Options:
    continue_from: str | int
    text: str | None
    fork: bool
    regenerate: bool
    replace_original: bool
    keep_files: bool = False


@dataclass(frozen=True)
class Plan:
    run_id: str
    fork: bool
    message_index: int
    branch: str  # the branch the continued run goes on
    at_end: bool  # a resume of a run turns came after: a new run at the branch's end
    tip_id: str  # the source branch's tip when planned: execution checks it did not move
    new_run_id: str
    options: Options


# -- planning -----------------------------------------------------------------------------


def options_of(continue_from: str | int, text: str | None, fork: bool | None,
               regenerate: bool | None, replace_original: bool | None,
               keep_files: bool | None = None) -> Options:
    if regenerate and text is not None:
        raise BadRequest("regenerate takes no input: it answers the same messages again")
    return Options(continue_from, text, bool(fork), bool(regenerate),
                   True if replace_original is None else bool(replace_original),
                   bool(keep_files))


def plan_continue(git: GitSession, run_id: str, options: Options, new_run_id: str) -> Plan:
    """Decide, reading only, where and how the run goes on (errors here change nothing)."""
    view = locate_run(git, run_id)
    messages = view.messages
    k = resolve_index(messages, options.continue_from, options.regenerate)
    if options.continue_from == "end" and orchestrate.open_calls(messages):
        k = len(messages)  # a spawn or merge a kill cut off: resumed where it was
    if not options.text and not any(m.get("role") == "user" for m in messages[:k]):
        raise BadRequest(f"the first {k} messages hold no user message: give an input")
    status = view.record.get("status")
    ends_branch = bool(view.entries) and view.entries[-1].seq == layout.next_seq(git, view.tip) - 1
    # Only a failed or interrupted run goes on on its branch, and only from its end: in place
    # while it is still the last thing on its branch, else as a new run at the branch's end
    # (a run's messages are numbered contiguously: the later turns stay where they are);
    # everything else becomes a sibling run. A spawn or merge a kill cut off goes on in place
    # only (its journal is the run's).
    resumed = (status in RESUMABLE or status == "RUNNING") and not options.fork \
        and not options.regenerate and k == len(messages)
    resumed_by = view.record.get("resumed_by_run_id")
    if resumed and resumed_by:
        raise AlreadyResumed(run_id, resumed_by)
    in_place = resumed and ends_branch
    at_end = resumed and not ends_branch and not orchestrate.open_calls(messages)
    branch = view.branch if in_place or at_end else run_branch(new_run_id)
    return Plan(run_id, not (in_place or at_end), k, branch, at_end, str(view.tip.id),
                new_run_id, options)


# -- writing ------------------------------------------------------------------------------


def _mark_regenerated(git: GitSession, view: RunOnBranch, new_run_id: str) -> RunRecord:
    record: RunRecord = {**view.record, "status": "REGENERATED", "regenerated_by": new_run_id,
                         "updated_at": now_iso()}
    summary = f"Run {view.run_id[:10]} regenerated as {new_run_id[:10]}"
    # No message index: this record-only commit is not a checkpoint of the run.
    git.commit_on_branch(view.branch, {view.record_path: to_json_bytes(record)},
                         summary=summary, kind="fork", run_id=view.run_id)
    return record


def _copies(kept: list[MessageRecord], run_id: str) -> list[MessageRecord]:
    out = []
    first_answer = True
    for msg in kept:
        copy: MessageRecord = {**msg, "run_id": run_id, "copied_from": msg.get("id"),
                               "id": new_message_id()}
        if msg.get("role") == "assistant" and first_answer:
            copy["id"] = run_id  # the run id is the id of the run's first assistant message
            first_answer = False
        out.append(copy)
    return out


def _fork(git: GitSession, handle: SessionHandle, view: RunOnBranch, plan: Plan
          ) -> tuple[TurnContext, RunRecord | None]:
    k, new_id = plan.message_index, plan.new_run_id
    base, owner = find_checkpoint(git, view, k)
    marked = None
    if plan.options.regenerate and plan.options.replace_original:
        marked = _mark_regenerated(git, view, new_id)
    entries = list(layout.stored_messages(git, base))
    trailing = 0
    while owner and trailing < len(entries) \
            and entries[-1 - trailing].message.get("run_id") == owner:
        trailing += 1
    prior, dropped = entries[:len(entries) - trailing], entries[len(entries) - trailing:]
    first_seq = dropped[0].seq if dropped else layout.next_seq(git, base)
    changes: dict[str, Change] = {e.path: None for e in dropped}
    owner_record = layout.find_run_path(git, owner, base) if owner else None
    if owner_record:
        changes[owner_record] = None
    copies = _copies(view.messages[:k], new_id)
    for i, msg in enumerate(copies):
        changes[layout.message_path(git, first_seq + i, msg["role"], msg["id"], base)] = \
            to_json_bytes(msg)
    now = now_iso()
    record = new_run(
        new_id, handle.session_id, plan.branch, created_at=now, forked_from_run_id=view.run_id,
        forked_from_message_index=k, message_count=k,
        regenerated_from=view.run_id if plan.options.regenerate else None)
    record["continue_from"] = plan.options.continue_from
    record_path = layout.new_run_path(git, new_id, base)
    summary = f"Fork of run {view.run_id[:10]} at message {k + 1}"
    git.create_branch(plan.branch, base.id)
    if plan.options.keep_files:
        record["keep_files"] = True
        changes[record_path] = to_json_bytes(record)
        _fork_keeping_files(git, view, plan.branch, changes, summary, new_id, k)
        atomic.checkout(git, plan.branch)  # the files on disk are those already
    else:
        atomic.checkout(git, plan.branch)
        changes[record_path] = to_json_bytes(record)
        git.write_checkpoint(changes, summary=summary, kind="fork", run_id=new_id,
                             message_index=k)
    ctx = turn_context(git, handle, record, record_path, messages=copies,
                       prior=[e.message for e in prior], next_seq=first_seq + k, at=base)
    return ctx, marked


def _fork_keeping_files(git: GitSession, view: RunOnBranch, branch: str,
                        changes: dict[str, Change], summary: str, run_id: str, k: int) -> None:
    """The fork's commit on `branch` (not checked out yet), as trees only: the checkpoint's
    history with `changes`, and `workdir/` as the source branch's tip holds it now."""
    tip = git.commit(git.branch_tip(view.branch))  # after the user's edits were committed
    current = workdir_tree(tip)
    entries: dict[str, bytes | tuple[pygit2.Oid, int] | None] = {
        rel: change for rel, change in changes.items()
        if change is None or isinstance(change, bytes)}
    entries[WORKDIR] = (current.id, int(FileMode.TREE)) if current is not None else None
    git.commit_on_branch(branch, entries, summary=summary + " (files kept)", kind="fork",
                         run_id=run_id, message_index=k)


def _resume_at_end(git: GitSession, handle: SessionHandle, view: RunOnBranch, plan: Plan
                   ) -> TurnContext:
    """A new run at the end of the interrupted run's branch that goes on with it: copies of
    its messages (the user's, the answer so far) open it, the turns after it stay. The
    interrupted run's record is marked `resumed_by_run_id` in the same pending files and
    first checkpoint as the new run's (write_pending_to_disk: after it), so its Resume is
    spent exactly when the new run is on disk."""
    if git.branch != view.branch:
        atomic.checkout(git, view.branch)
    record = new_run(plan.new_run_id, handle.session_id, view.branch)
    record["resumes_run_id"] = view.run_id
    marked: RunRecord = {**view.record, "resumed_by_run_id": plan.new_run_id}
    copies = _copies(view.messages, plan.new_run_id)
    # The model is sent the interrupted run's messages once: as the copies, at the end.
    prior = sent_once(layout.messages(git), copies)
    ctx = turn_context(git, handle, record, layout.new_run_path(git, plan.new_run_id),
                       prior=prior)
    for copy in copies:
        add_message(ctx, copy)
    ctx.pending[view.record_path] = to_json_bytes(marked)
    return ctx


def execute_plan(git: GitSession, handle: SessionHandle, plan: Plan
                 ) -> tuple[TurnContext, RunRecord | None, str]:
    """On the session thread: make the branch and the turn's context, ready to drive.
    Returns the context, the source's record if it was marked REGENERATED, and HEAD."""
    view = locate_run(git, plan.run_id)
    if str(view.tip.id) != plan.tip_id:
        raise Busy(f"branch {view.branch} moved meanwhile; try again")
    # The user's unsaved edits stay on the branch they were made on.
    snapshot_user_edits(git)
    if plan.fork:
        ctx, marked = _fork(git, handle, view, plan)
    elif plan.at_end:
        ctx, marked = _resume_at_end(git, handle, view, plan), None
    else:
        if git.branch != view.branch:
            atomic.checkout(git, view.branch)
        ctx, marked = resume_in_place(git, handle, view, plan.message_index), None
    if plan.options.text:
        add_message(ctx, new_message("user", ctx.run_id, plan.options.text))
    write_pending_to_disk(git, ctx)
    return ctx, marked, str(git.head_oid())


# -- the core calls -----------------------------------------------------------------------


async def continue_run(
    braid: Services, user_id: str, session_id: str, run_id: str, *,
    continue_from: str | int = "end", input: str | None = None, fork: bool | None = None,
    regenerate: bool | None = None, replace_original: bool | None = None,
    keep_files: bool | None = None,
) -> ContinueResult:
    """Continue a run (DESIGN §4): returns the run going on (events follow like a turn).
    `keep_files`: a fork starts from the source branch's current files, not the checkpoint's
    (the conversation alone is rewound)."""
    handle = braid.store.get_owned(user_id, session_id)
    options = options_of(continue_from, input, fork, regenerate, replace_original, keep_files)
    sid = handle.session_id
    if braid.runs.find(sid, run_id):
        raise Busy(f"run {run_id} is still going on")
    if options.continue_from == "end" and not (options.fork or options.regenerate):
        for active in braid.runs.for_session(sid):  # going on with it, not yet committed
            if active.ctx is not None and active.ctx.run.get("resumes_run_id") == run_id:
                raise AlreadyResumed(run_id, active.ctx.run_id)
    new_id = new_message_id()
    plan = await handle.call(lambda git: plan_continue(git, run_id, options, new_id))
    # Continuing switches the session's one workdir to the run's branch: nothing else may run.
    if await braid.locks.held(sid):
        raise Busy("a run is going on in this session")
    async with claim_turn(braid.locks, braid.runs, sid, plan.branch) as active:
        ctx, marked, head = await handle.call(lambda git: execute_plan(git, handle, plan))
        if marked is not None:
            await braid.index.upsert_run(sid, marked)
        # The page re-renders the branch now shown; `run_started` then adds the live turn.
        braid.bus.publish(sid, events.run_continued(ctx.run_id, plan.branch, head, plan.fork,
                                                    run_id, plan.message_index))
        await launch(braid, handle, ctx, active)
    if plan.fork:
        braid.bus.publish(sid, events.checkpoint(ctx.run_id, head, "fork"))
    braid.bus.publish(sid, events.dag_changed(run_id=ctx.run_id, branch=plan.branch))
    return _result(ctx.run, plan)


def _result(run: RunRecord, plan: Plan) -> ContinueResult:
    return {"run_id": run["run_id"], "status": run["status"], "branch": run["branch"],
            "forked_from_run_id": run["forked_from_run_id"],
            "forked_from_message_index": run["forked_from_message_index"],
            "regenerated_from": run["regenerated_from"], "created_at": run["created_at"],
            "forked": plan.fork, "message_index": plan.message_index,
            "source_run_id": plan.run_id}


async def continue_run_to_end(braid: Services, user_id: str, session_id: str, run_id: str,
                              **params: Any) -> ContinuedRun:
    """`continue_run` and wait for it: the HTTP API's `POST /api/runs/{run_id}/continue`."""
    from server.features.sessions import get_run

    started = await continue_run(braid, user_id, session_id, run_id, **params)
    handle = braid.store.get_owned(user_id, session_id)
    active = braid.runs.find(handle.session_id, started["run_id"])
    if active is not None:
        await active.done.wait()
    run = await get_run(braid, user_id, session_id, started["run_id"])
    return {**run, "forked": started["forked"], "message_index": started["message_index"],
            "source_run_id": started["source_run_id"]}


async def list_checkpoints(braid: Services, user_id: str, session_id: str,
                           run_id: str) -> CheckpointList:
    handle = braid.store.get_owned(user_id, session_id)
    checkpoints = await handle.call(lambda git: checkpoint_timeline(git, run_id))
    return {"run_id": run_id, "checkpoints": checkpoints}


# -- rewinding the files only -------------------------------------------------------------


def do_rewind(git: GitSession, run_id: str, message_index: int, rewind_id: str
              ) -> RevertResult:
    """One `revert` commit (its `Braid-Run` = `rewind_id`) bringing `workdir/` back to the
    run's checkpoint at `message_index`, with a system note whose id is `rewind_id`: the
    conversation is kept, and `unrevert_turn {turn_id: rewind_id}` undoes it."""
    view = locate_run(git, run_id)
    count = len(view.messages)
    if not 0 <= message_index <= count:
        raise BadRequest(f"message_index {message_index} is outside 0..{count} (the run's "
                         "messages)", {"message_count": count})
    target, _ = find_checkpoint(git, view, message_index)
    # The user's unsaved edits are committed first: the rewind's undo gives them back.
    snapshot_user_edits(git)
    head = git.head_commit()
    result = {path: new for path, _, new in tree_delta(workdir_tree(head), workdir_tree(target))}
    if not result:
        raise Conflict("the files already are as they were at that message: nothing to rewind",
                       {"conflicts": [], "turn_id": run_id})
    at = view.messages[message_index] if message_index < count else None
    point: RewindPoint = {"run_id": view.run_id, "message_index": message_index,
                          "message_id": at["id"] if at else None, "commit_id": str(target.id)}
    names = ", ".join(sorted(result)[:20]) + (f" and {len(result) - 20} more"
                                             if len(result) > 20 else "")
    where = f"before run {view.run_id}" if message_index == 0 else \
        f"after the first {message_index} messages of run {view.run_id}"
    text = (f"The files were rewound to how they were {where} (the conversation was kept): "
            f"{names} changed back, so edits made to them since then no longer stand.")
    out = commit_files(git, rewind_id, {}, result, "revert", text,
                       {"id": rewind_id, "kind": "rewind", "rewound_to": point},
                       point="rewind.after_files",
                       summary=f"Rewind files to run {view.run_id[:10]} at message "
                               f"{message_index}")
    out["rewind"], out["conflicts"] = point, []
    return out


async def rewind_files(braid: Services, user_id: str, session_id: str, run_id: str,
                       message_index: int) -> RevertResult:
    """Rewind the files only (DESIGN §4 "Rewind, on either axis"), on the branch shown,
    holding it like a revert (`busy` while a run is live on it)."""
    handle = braid.store.get_owned(user_id, session_id)
    rewind_id = new_message_id()
    return await exclusive(braid, handle,
                           lambda git: do_rewind(git, run_id, message_index, rewind_id))
