"""A turn's record as it is made: its context (the run record, its messages, what is still
to commit), opening it (user edits first, then the user message and a RUNNING record on
disk) and its checkpoints (taken from the turn's state on the loop, committed on the
session thread). Every kind of turn opens with `open_turn`: a message, a merge turn, a
sub-agent; `turns.py` drives them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import crash, layout, names
from .git_session import DISK, WORKDIR, GitSession, history_path, to_json_bytes
from .ids import new_message_id, now_iso
from .records import Message, RunRecord

if TYPE_CHECKING:
    from .store import SessionHandle

log = logging.getLogger("braid")
BULK_EDITS = 300


@dataclass
class TurnContext:
    """What a live turn carries between its model calls and its checkpoints."""

    handle: SessionHandle
    run: dict[str, Any]
    run_file: str
    prior: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    next_seq: int
    pending: dict[str, bytes] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    tool_calls: int = 0
    # Running totals of `prior`'s token estimates (layout.message_sums), when it is a
    # branch's listing: the context budget then bisects rather than walks.
    prior_sums: list[int] | None = None
    legacy: bool = False  # the branch's history is in the earlier layout (history.py)
    # A tool call the turn was stopped during: its result joins before the last commit.
    inflight: tuple[dict[str, Any], asyncio.Future[Any]] | None = None

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def snapshot_user_edits(git: GitSession) -> str | None:
    """Commit what the user changed in workdir/ since HEAD as `user-edit`, so it is never
    attributed to, or clobbered by, a turn."""
    dirty, unnamed = names.split(git.changed_workdir_paths())
    if unnamed:
        log.warning("left out of the user-edit commit (not UTF-8): %s",
                    ", ".join(names.shown(p) for p in unnamed))
    if not dirty:
        return None
    listed = ", ".join(p[len(WORKDIR) + 1:] for p in dirty[:5])
    more = f" and {len(dirty) - 5} more" if len(dirty) > 5 else ""
    summary = f"User edits: {listed}{more}"
    if len(dirty) > BULK_EDITS:  # a folder dropped in: its blobs in one pack
        return str(git.commit_workdir(dirty, summary=summary, kind="user-edit"))
    oid = git.write_checkpoint({p: DISK for p in dirty}, summary=summary, kind="user-edit")
    return str(oid)


def new_message(role: str, run_id: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return Message(role, content, run_id, extra=extra).as_dict()


def add_message(ctx: TurnContext, msg: dict[str, Any]) -> None:
    path = history_path(ctx.next_seq, msg["role"], msg["id"], ctx.legacy)
    ctx.next_seq += 1
    ctx.messages.append(msg)
    ctx.pending[path] = to_json_bytes(msg)


def open_turn(
    git: GitSession, handle: SessionHandle, text: str, fields: dict[str, Any],
    notes: tuple[str, ...] = (),
) -> TurnContext:
    """Open a turn on the session thread: snapshot user edits, then the user message (after
    any `notes`) and a RUNNING record written to disk; `turns.launch` then drives it."""
    snapshot_user_edits(git)
    crash.at("turn.prepare")
    run_id = new_message_id()
    run = RunRecord(run_id, handle.session_id, git.branch).as_dict()
    run.update(fields)
    ctx = TurnContext(
        handle=handle, run=run, run_file=layout.new_run_path(git, run_id),
        prior=layout.messages(git), messages=[], next_seq=layout.next_seq(git),
        prior_sums=layout.message_sums(git), legacy=layout.is_legacy(git),
    )
    for note in notes:  # system messages that open the turn (a merge turn's note)
        add_message(ctx, new_message("system", run_id, note))
    add_message(ctx, new_message("user", run_id, text))
    if not handle.meta.get("title"):
        handle.meta["title"] = text.strip().splitlines()[0][:60] if text.strip() else "Untitled"
        ctx.pending["session.json"] = to_json_bytes(handle.meta)
    write_pending_to_disk(git, ctx)
    return ctx


def write_pending_to_disk(git: GitSession, ctx: TurnContext) -> None:
    # Written before the model is called, so a server killed mid-turn leaves the user's
    # message and a RUNNING record on disk for recovery to commit.
    ctx.run["message_count"] = len(ctx.messages)
    files = dict(ctx.pending)
    files[ctx.run_file] = to_json_bytes(ctx.run)
    for rel, data in files.items():
        # Atomic (a kill leaves no half record); history/ and runs/ files go to the pending
        # folder (staging.py: they are never on disk in the working tree).
        git.write_uncommitted(rel, data)


def checkpoint_changes(ctx: TurnContext) -> tuple[dict[str, Any], int]:
    """On the loop: what the turn's next checkpoint writes (its new messages, its record,
    the files its tools changed) and the message index it holds."""
    ctx.run["message_count"] = len(ctx.messages)
    ctx.run["updated_at"] = now_iso()
    changes: dict[str, Any] = dict(ctx.pending)
    changes[ctx.run_file] = to_json_bytes(ctx.run)
    for rel in ctx.changed:
        changes[f"{WORKDIR}/{rel}"] = DISK
    return changes, len(ctx.messages)


def write_turn_commit(git: GitSession, run_id: str, changes: dict[str, Any], index: int,
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

    def work(git: GitSession) -> str:
        if finishing:
            crash.at("turn.finish")
        return write_turn_commit(git, run_id, changes, index, kind, summary)

    oid = await ctx.handle.call(work)
    ctx.pending.clear()
    ctx.changed.clear()
    return oid
