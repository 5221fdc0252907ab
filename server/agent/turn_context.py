"""A turn's record as it is made: its context (the run record, its messages, what is still
to commit), opening it (user edits first, then the user message and a RUNNING record on
disk) and its checkpoints (taken from the turn's state on the loop, committed on the
session thread). Every kind of turn opens with `open_turn`: a message, a merge turn, a
sub-agent; `turns.py` drives them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

from server.agent.compaction import instructions
from server.agent.compaction.instructions import Instructions
from server.base import crash, events, names
from server.base.events import Event
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    MessageRecord,
    RunFields,
    RunRecord,
    Skipped,
    ToolCall,
    new_message,
    new_run,
    to_json_bytes,
)
from server.git.history import RUNS, history_path
from server.git.session import Change, GitSession
from server.git.workdir.scan import WORKDIR, why_left_out
from server.git.workdir.staging import DISK
from server.store import context, layout, session_settings

if TYPE_CHECKING:
    import pygit2

    from server.store.checkpoints import RunOnBranch
    from server.store.session_store import SessionHandle

log = logging.getLogger("braid")
BULK_EDITS = 300
TITLE_CHARS = names.TITLE_FIRST_LINE


@dataclass
class TurnContext:
    """What a live turn carries between its model calls and its checkpoints."""

    handle: SessionHandle
    run: RunRecord
    run_file: str
    prior: Sequence[MessageRecord]
    messages: list[MessageRecord]
    next_seq: int
    pending: dict[str, bytes] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    tool_calls: int = 0
    # Running totals of `prior`'s token estimates, whole and masked (layout.window_sums),
    # when it is a branch's listing: the context budget then bisects rather than walks.
    prior_sums: context.Sums | None = None
    # The branch's AGENTS.md in effect (None: not read yet), read again when a checkpoint
    # of the turn changes it.
    instructions: Instructions | None = None
    # A compaction to make before the turn's first call (agent/compaction/run.py): the seq kept free
    # before the turn's first message, and the tokens of newest messages it keeps whole.
    compaction: tuple[int, int] | None = None
    legacy: bool = False  # the branch's history is in the earlier layout (history.py)
    # A tool call the turn was stopped during: its result joins before the last commit.
    inflight: tuple[ToolCall, asyncio.Future[Any]] | None = None
    # Names git cannot hold the opening look found (the user's, or a shell's before): the
    # turn's next checkpoint lists them as left out, and so does its record (`skipped`).
    carried: set[str] = field(default_factory=set)
    last_skipped: list[Skipped] = field(default_factory=list)  # of the last checkpoint

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def snapshot_user_edits(git: GitSession) -> str | None:
    """Commit what the user changed in workdir/ since HEAD as `user-edit`, so it is never
    attributed to, or clobbered by, a turn."""
    return take_user_edits(git)[0]


def take_user_edits(git: GitSession) -> tuple[str | None, list[str]]:
    """`snapshot_user_edits`, and the workdir-relative names it found that git cannot hold:
    left out of the commit and listed in it (names.py), never a reason to fail."""
    found = git.scan.changed_paths()
    unholdable = {p for p in found if why_left_out(git.path, p)}
    dirty = [p for p in found if p not in unholdable]
    bad = sorted(p[len(WORKDIR) + 1:] for p in unholdable)
    if not dirty:  # nothing to commit: a later commit lists them
        return None, bad
    listed = ", ".join(p[len(WORKDIR) + 1:] for p in dirty[:5])
    more = f" and {len(dirty) - 5} more" if len(dirty) > 5 else ""
    summary = f"User edits: {listed}{more}"
    if len(found) > BULK_EDITS:  # a folder dropped in: its blobs in one pack
        return str(git.commit_workdir(found, summary=summary, kind="user-edit")), bad
    oid = git.write_checkpoint({p: DISK for p in found}, summary=summary, kind="user-edit")
    return str(oid), bad


def first_line_title(text: str) -> str:
    """A new session's title (DESIGN §4): its first message's first line (the first with
    anything on it), at most TITLE_CHARS characters."""
    line = next((t for t in map(names.plain_title, text.splitlines()) if t), "")
    return names.plain_title(line, TITLE_CHARS) or "Untitled"


def add_message(ctx: TurnContext, msg: MessageRecord) -> None:
    path = history_path(ctx.next_seq, msg["role"], msg["id"], ctx.legacy)
    ctx.next_seq += 1
    ctx.messages.append(msg)
    ctx.pending[path] = to_json_bytes(msg)


def open_turn(
    git: GitSession, handle: SessionHandle, text: str, fields: RunFields,
    notes: tuple[str, ...] = (), run_id: str | None = None,
    fresh: bool = False, compact_if: Callable[[GitSession], int] | None = None,
) -> TurnContext:
    """Open a turn on the session thread: snapshot user edits, then the user message (after
    any `notes`) and a RUNNING record written to disk; `turns.launch` then drives it.
    `run_id`: chosen by the caller (a queued message's id, features/queue.py), else new.
    `fresh`: a worktree just checked out (a sub-agent's), which nobody can have edited.
    `compact_if(git)`: tokens of newest messages a compaction would keep whole, or 0 for
    none; else a seq is kept free before the turn's messages for the compaction
    (agent/compaction/run.py), made before the turn's first call."""
    _, unholdable = (None, []) if fresh else take_user_edits(git)
    crash.at("turn.prepare")
    run_id = run_id or new_message_id()
    run: RunRecord = {**new_run(run_id, handle.session_id, git.branch), **fields}
    seq = layout.next_seq(git)
    keep = compact_if(git) if compact_if is not None else 0
    ctx = turn_context(git, handle, run, layout.new_run_path(git, run_id),
                       next_seq=seq + bool(keep))
    ctx.carried, ctx.instructions = set(unholdable), instructions.project(git)
    ctx.compaction = (seq, keep) if keep else None
    for note in notes:  # system messages that open the turn (a merge turn's note)
        add_message(ctx, new_message("system", run_id, note))
    add_message(ctx, new_message("user", run_id, text))
    if not handle.meta.get("title"):  # a session is named by its first message until renamed
        handle.meta["title"] = first_line_title(text)
        ctx.pending["session.json"] = to_json_bytes(handle.meta)
        session_settings.save(git.path, handle.meta)  # the session's title, on any branch
    write_pending_to_disk(git, ctx)
    return ctx


def turn_context(git: GitSession, handle: SessionHandle, run: RunRecord, run_file: str, *,
                 messages: list[MessageRecord] | None = None,
                 prior: Sequence[MessageRecord] | None = None, next_seq: int | None = None,
                 at: pygit2.Commit | None = None) -> TurnContext:
    """Every live turn's context is made here, on the session thread: `messages` the run's
    own already on the branch (a resume's), `prior` what came before them (default: the
    branch's messages, with their running sums), `next_seq` the next message's number
    (default: the branch's next), all read at `at` (default HEAD)."""
    sums = None
    if prior is None:
        prior, sums = branch_prior(git, at)
    return TurnContext(handle=handle, run=run, run_file=run_file, prior=prior,
                       messages=messages if messages is not None else [],
                       next_seq=next_seq if next_seq is not None else layout.next_seq(git, at),
                       prior_sums=sums, legacy=layout.is_legacy(git, at))


def sent_once(prior: Sequence[MessageRecord], copies: Iterable[MessageRecord] = ()
              ) -> Sequence[MessageRecord]:
    """`prior` without the messages a copy stands for, later on the branch or in `copies`
    (a run resumed at the branch's end opens with copies of the interrupted run's: the
    model is sent that conversation once, where it goes on). `prior` itself when no copy
    stands for any of its messages (a fork's copies' sources are on another branch)."""
    copied = {m["copied_from"] for m in chain(prior, copies) if m.get("copied_from")}
    if not copied or not any(m["id"] in copied for m in prior):
        return prior
    return [m for m in prior if m["id"] not in copied]


def branch_prior(git: GitSession, at: pygit2.Commit | None = None
                 ) -> tuple[Sequence[MessageRecord], context.Sums]:
    """The branch's messages at `at` (default HEAD) as a turn on it sends them
    (`sent_once`), with their running totals: the listing's own when nothing is left out."""
    listed = layout.messages(git, at)
    if not layout.holds_copies(git, at):  # `sent_once(listed)` is `listed`, found in O(change)
        return listed, layout.window_sums(git, at)
    kept = sent_once(listed)
    return (listed, layout.window_sums(git, at)) if kept is listed else \
        (kept, context.sums_of(kept))


def resume_in_place(git: GitSession, handle: SessionHandle, view: RunOnBranch,
                    message_index: int) -> TurnContext:
    """A failed or interrupted run going on in place, on its branch checked out: its
    messages kept (the last on the branch), its record RUNNING again."""
    record: RunRecord = {**view.record, "status": "RUNNING", "error": None,
                         "updated_at": now_iso(), "resumed_from_message_index": message_index}
    first = view.entries[0].seq if view.entries else layout.next_seq(git)
    prior = [e.message for e in layout.stored_messages(git, git.head_commit()) if e.seq < first]
    return turn_context(git, handle, record, view.record_path, prior=prior,
                        messages=[m.copy() for m in view.messages])


def write_pending_to_disk(git: GitSession, ctx: TurnContext) -> None:
    # Written before the model is called, so a server killed mid-turn leaves the user's
    # message and a RUNNING record on disk for recovery to commit.
    ctx.run["message_count"] = len(ctx.messages)
    files = dict(ctx.pending)
    files[ctx.run_file] = to_json_bytes(ctx.run)
    # Another run's record (the one a resume at the branch's end marks as resumed by this
    # run) goes after this run's own: a kill between them leaves no mark naming a run that
    # is not on disk, so the earlier run can still be resumed.
    for rel in [r for r in files if r.startswith(f"{RUNS}/") and r != ctx.run_file]:
        files[rel] = files.pop(rel)
    for rel, data in files.items():
        # Atomic (a kill leaves no half record); history/ and runs/ files go to the pending
        # folder (staging.py: they are never on disk in the working tree).
        git.pending.write(rel, data)


def checkpoint_changes(ctx: TurnContext) -> tuple[dict[str, Change], int]:
    """On the loop: what the turn's next checkpoint writes (its new messages, its record,
    the files its tools changed) and the message index it holds."""
    ctx.run["message_count"] = len(ctx.messages)
    ctx.run["updated_at"] = now_iso()
    changes: dict[str, Change] = dict(ctx.pending)
    for rel in ctx.changed | ctx.carried:  # a name git cannot hold: left out and listed
        changes[f"{WORKDIR}/{rel}"] = DISK
    work = ctx.handle.path / WORKDIR
    ctx.last_skipped = [names.skipped_entry(rel, why) for rel in sorted(ctx.changed | ctx.carried)
                        if (why := why_left_out(work, rel))]
    if ctx.last_skipped:  # the record keeps the turn's, for its bubble's note
        known = ctx.run.setdefault("skipped", [])
        known += [e for e in ctx.last_skipped if e not in known]
    changes[ctx.run_file] = to_json_bytes(ctx.run)
    return changes, len(ctx.messages)


def checkpoint_event(ctx: TurnContext, commit_id: str, kind: str
                     ) -> Event[Literal["checkpoint"]]:
    """The `checkpoint` event of the turn's last commit: with the names it left out."""
    return events.checkpoint(ctx.run_id, commit_id, kind, skipped=list(ctx.last_skipped))


def write_turn_commit(git: GitSession, run_id: str, changes: dict[str, Change], index: int,
                      kind: str, summary: str) -> str:
    """On the session thread: the checkpoint commit; the turn's state is not touched."""
    crash.at("turn.checkpoint")
    oid = git.write_checkpoint(changes, summary=summary, kind=kind, run_id=run_id,
                               message_index=index, sync_index=False)
    return str(oid)


async def commit_turn(ctx: TurnContext, kind: str, summary: str, *,
                      finishing: bool = False) -> str:
    """A checkpoint of a live turn: taken from its state on the loop, committed on the
    session thread, and only then the taken changes are cleared (on the loop again)."""
    changes, index = checkpoint_changes(ctx)
    run_id = ctx.run_id

    def work(git: GitSession) -> tuple[str, Instructions | None]:
        if finishing:
            crash.at("turn.finish")
        oid = write_turn_commit(git, run_id, changes, index, kind, summary)
        # A turn that wrote AGENTS.md: its next call follows it.
        return oid, instructions.project(git) if instructions.PATH in changes else None

    oid, found = await ctx.handle.call(work)
    if found is not None:
        ctx.instructions = found
    ctx.pending.clear()
    ctx.changed.clear()
    ctx.carried.clear()
    return oid
