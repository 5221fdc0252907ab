"""The turn's view model: which controls a turn shows, decided once here from its run record
and whether it is streaming, instead of re-derived in each partial ("is this turn finished?"
was written out in four templates). Pure: a turn item in, flags out.

A turn item is what `sessions.build_turns` makes (`run_id`, `user`, `parts`, `run`), plus
`streaming` (rendered from a live event), `files` (its chips) and `siblings` (`‹ 2/3 ›`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from server.agent.orchestrate import SPAWN
from server.base.records import FileChip, MessageRecord, RunRecord
from server.base.results import ChildCard, TranscriptItem
from server.store.layout import answer_of

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
        # Spent once a run at the branch's end goes on with it (its record names that run;
        # a live one not yet committed is named by `resumed_by` below).
        can_resume=answered and status in RESUMABLE and not run.get("resumed_by_run_id"),
        show_nav=answered or bool(turn.get("siblings")),
        reverted_files=_reverted_files(run, turn),
    )


def resumed_by(turns: list[TranscriptItem], run_id: str, by_run_id: str) -> None:
    """Mark run `run_id`'s turn among `turns` as gone on with by run `by_run_id` (a resume
    at the branch's end, live, whose first checkpoint will write the same in its record)."""
    for turn in turns:
        if turn.get("run_id") == run_id and turn.get("run"):
            marked = cast(RunRecord, dict(turn["run"]))  # a record, or the run's index row
            marked["resumed_by_run_id"] = by_run_id
            turn["run"] = marked


def _reverted_files(run: Mapping[str, object], turn: TranscriptItem) -> frozenset[str]:
    paths = {f["path"] for f in turn.get("files") or ()}
    listed = run.get("reverted_files")
    if isinstance(listed, list):
        return frozenset(paths & {str(p) for p in listed})
    return frozenset(paths) if run.get("reverted") else frozenset()


# -- the sub-agents a turn spawned: one card each in its bubble ------------------------------
# Built from records alone, so a reload draws them without having seen an event: a user's
# spawn leaves a `sub-agent-result` turn (`run.sub_agent`, `run.parent_run_id`) after its
# parent; the model's `spawn_sub_agents` leaves its tool result (`{agents: [...]}`) in the
# parent's own parts; a child still running is read from its live run (events.live_cards).


def card_of_run(run: Mapping[str, Any], messages: list[MessageRecord], *, partial: str = "",
                files: list[FileChip] | None = None) -> ChildCard:
    """A child's card from its own run (live, or its end event): status, prompt, answer."""
    info: Mapping[str, Any] = run.get("sub_agent") or {}
    prompt = next((str(m.get("content") or "") for m in messages if m["role"] == "user"), "")
    status = str(run.get("status") or "RUNNING")
    return {"run_id": str(run.get("run_id") or ""),
            "parent_run_id": str(run.get("parent_run_id") or info.get("parent_turn_id") or ""),
            "call_id": info.get("call_id"), "branch": str(info.get("branch") or
                                                          run.get("branch") or ""),
            "label": str(info.get("label") or ""), "status": status, "prompt": prompt,
            "final_text": answer_of(messages) if status != "RUNNING" else "",
            "live_text": partial, "error": run.get("error"), "files": list(files or []),
            "usage": run.get("usage") or None,
            # Its own children (a sub-agent may spawn, BRAID_SUBAGENT_DEPTH deep).
            "children": _spawn_results({"run_id": run.get("run_id"), "parts": messages})}


def _card_of_result(parent_run_id: str, call_id: str | None,
                    agent: Mapping[str, Any]) -> ChildCard:
    return {"run_id": str(agent.get("run_id") or ""), "parent_run_id": parent_run_id,
            "call_id": call_id, "branch": str(agent.get("branch") or ""),
            "label": str(agent.get("label") or ""), "status": str(agent.get("status") or ""),
            "final_text": str(agent.get("final_text") or ""), "error": agent.get("error"),
            "commit_id": agent.get("commit_id"), "files": list(agent.get("files") or []),
            "usage": agent.get("usage") or None}


def _spawn_results(turn: TranscriptItem) -> list[ChildCard]:
    """The children of the model's spawn_sub_agents calls, from their tool results."""
    cards: list[ChildCard] = []
    for msg in turn.get("parts") or ():
        if msg.get("role") != "tool" or msg.get("name") != SPAWN:
            continue
        try:
            result = json.loads(str(msg.get("content") or ""))
        except ValueError:
            continue
        agents = result.get("agents") if isinstance(result, dict) else None
        for agent in agents if isinstance(agents, list) else ():
            if isinstance(agent, dict) and agent.get("run_id"):
                cards.append(_card_of_result(str(turn.get("run_id") or ""),
                                             msg.get("tool_call_id"), agent))
    return cards


def _journal_cards(turn: TranscriptItem) -> list[ChildCard]:
    """The children of the run's latest spawn_sub_agents call as its record's journal keeps
    them (`run.spawn`, agent/orchestrate.py), with their tokens: while the call goes on (a
    child that ended while the others run has no tool result yet), or after a kill."""
    run: Mapping[str, Any] = turn.get("run") or {}
    journal: Mapping[str, Any] = run.get("spawn") or {}
    cards = [_card_of_result(str(turn.get("run_id") or ""), journal.get("call_id"), child)
             for child in journal.get("children") or () if child.get("run_id")]
    for card in cards:  # a child that was running when its parent stopped (a kill)
        if card["status"] == "RUNNING" and run.get("status") != "RUNNING":
            card["status"] = "INTERRUPTED"
    return cards


def result_cards(turns: list[TranscriptItem]) -> dict[str, dict[str, ChildCard]]:
    """Every child the records of these turns name, by parent run and child run."""
    out: dict[str, dict[str, ChildCard]] = {}
    for turn in turns:
        run: Mapping[str, Any] = turn.get("run") or {}
        info: Mapping[str, Any] = run.get("sub_agent") or {}
        if run.get("kind") == "sub-agent-result" and run.get("parent_run_id") and \
                info.get("run_id"):
            card = _card_of_result(str(run["parent_run_id"]), info.get("call_id"), info)
            out.setdefault(card["parent_run_id"], {})[card["run_id"]] = card
        for card in _spawn_results(turn) + _journal_cards(turn):  # the journal's has tokens
            out.setdefault(card["parent_run_id"], {})[card["run_id"]] = card
    return out


def attach_children(turns: list[TranscriptItem], live: list[ChildCard]) -> list[ChildCard]:
    """Give each turn its children's cards (`turn["children"]`), the live ones as they are
    now; returns the cards attached."""
    found = result_cards(turns)
    for card in live:
        found.setdefault(card["parent_run_id"], {})[card["run_id"]] = card
    attached: list[ChildCard] = []
    for turn in turns:
        cards = found.get(str(turn.get("run_id") or ""))
        if cards:
            turn["children"] = list(cards.values())
            attached += turn["children"]
    for card in attached:  # grandchildren in their parent's card (the list grows as it goes)
        more = found.get(card["run_id"])
        if more:
            card["children"] = list({**{c["run_id"]: c for c in card.get("children") or []},
                                     **more}.values())
            attached += [c for c in card["children"] if c not in attached]
    return attached


def tokens_of(usage: Mapping[str, Any] | None) -> int:
    return int((usage or {}).get("prompt_tokens") or 0) + \
        int((usage or {}).get("completion_tokens") or 0)


def children_tokens(cards: list[ChildCard]) -> int:
    return sum(tokens_of(c.get("usage")) for c in cards)
