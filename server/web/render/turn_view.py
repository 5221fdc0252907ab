"""The turn's view model: which controls a turn shows, decided once here from its run record
and whether it is streaming, instead of re-derived in each partial ("is this turn finished?"
was written out in four templates). Pure: a turn item in, flags out.

A turn item is what `sessions.build_turns` makes (`run_id`, `user`, `parts`, `run`), plus
`streaming` (rendered from a live event), `files` (its chips) and `siblings` (`‹ 2/3 ›`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from server.base.results import TranscriptItem

RESUMABLE = ("ERROR", "INTERRUPTED")  # resumed in place by a continue_run without options


@dataclass(frozen=True)
class TurnFlags:
    status: str
    # Nothing of it is moving any more: not streaming, its record not RUNNING.
    settled: bool
    # Settled with a final status in its record: the turn has ended.
    finished: bool
    show_status: bool  # a badge for a status other than COMPLETED
    show_files: bool  # file chips
    can_revert: bool  # Revert / Redo beside them (a sub-agent's result has its child's chips)
    show_context: bool  # the "context 12.3k of 32k tokens" figure
    can_edit: bool  # Edit & rerun on its user messages
    can_spawn: bool  # Spawn sub-agent from it
    can_regenerate: bool
    can_resume: bool
    show_nav: bool  # the row holding the switcher, Regenerate and Resume
    # The files of it standing reverted (a per-file revert; all once the whole turn is).
    reverted_files: frozenset[str] = frozenset()


def turn_flags(turn: TranscriptItem) -> TurnFlags:
    run: Mapping[str, object] = turn.get("run") or {}  # a record, an index row, or a part
    status = str(run.get("status") or "")
    settled = status != "RUNNING" and not turn.get("streaming")
    finished = settled and bool(status)
    has_run = bool(turn.get("run_id"))
    answered = finished and has_run and bool(turn.get("user"))
    context = run.get("context")
    budget = context.get("budget") if isinstance(context, dict) else None
    return TurnFlags(
        status=status,
        settled=settled,
        finished=finished,
        show_status=bool(status) and status not in ("RUNNING", "COMPLETED"),
        show_files=settled and bool(turn.get("files")),
        can_revert=settled and bool(turn.get("files")) and run.get("kind") != "sub-agent-result",
        show_context=settled and bool(budget),
        can_edit=finished and has_run,
        can_spawn=finished and has_run and run.get("kind") != "upload",
        can_regenerate=answered,
        can_resume=answered and status in RESUMABLE,
        show_nav=answered or bool(turn.get("siblings")),
        reverted_files=_reverted_files(run, turn),
    )


def _reverted_files(run: Mapping[str, object], turn: TranscriptItem) -> frozenset[str]:
    paths = {f["path"] for f in turn.get("files") or ()}
    listed = run.get("reverted_files")
    if isinstance(listed, list):
        return frozenset(paths & {str(p) for p in listed})
    return frozenset(paths) if run.get("reverted") else frozenset()
