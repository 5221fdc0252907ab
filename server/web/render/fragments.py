"""Small pure pieces the socket renderers share: out-of-band wrappers, toasts, the run state,
the sidebar, and the turn an event's payload describes; and the shapes of the renderers
themselves (`View`, `Renderer`), so the modules that render one action's frames need not
import the table that gathers them (frames.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, cast

from server.base.errors import ErrorInfo
from server.base.records import SessionRow
from server.base.results import (
    ChildCard,
    EventData,
    InstructionsShown,
    QueuedMessage,
    RunSummary,
    SessionInfo,
    Transcript,
    TranscriptItem,
    UsageTotal,
)
from server.features import sessions
from server.web.render.dag_layout import Layout
from server.web.render.names import Names
from server.web.render.templating import render


@dataclass
class View:
    """One event as its frames render it."""

    data: EventData  # the payload
    names: Names  # readable names of the session's branches and runs
    running: list[str]  # the live runs the user watches (the Stop button)
    reads: EventReads = field(default_factory=lambda: EventReads())  # what LOADS read for it


class EventReads(TypedDict, total=False):
    """What an event's frame needs beyond its payload, read once (events.LOADS)."""

    title: str | None
    sessions: list[SessionRowView]
    usage: UsageTotal
    transcript: Transcript
    layout: Layout
    info: SessionInfo
    archived: list[SessionRow]
    picker: str
    children: list[ChildCard]  # a finished turn's sub-agents, their tokens read
    queue: list[QueuedMessage]  # the session's queue now (queue_changed)
    instructions: InstructionsShown  # the header's chip: the shown branch's, now


class SessionRowView(SessionRow):
    """A sidebar row: its depth under the session it was forked from."""

    depth: int


class Renderer(Protocol):
    """What a result or error renderer is handed: one connection's `frames.HtmlRenderer`."""

    def toast(self, message: str, level: str = "error") -> str: ...


EventRenderer = Callable[[View], str]
# A result renderer takes the result of the action it is listed under: the table maps each
# action to its own renderer, so the result's type is the one that action returns.
ResultRenderer = Callable[[Renderer, Any], Awaitable[str]]
ErrorRenderer = Callable[[Renderer, ErrorInfo], Awaitable[str]]


def oob_append(target_id: str, inner: str, turn_part: bool = False) -> str:
    """beforeend appends the wrapper's children to the element with the wrapper's id.
    `turn_part`: the target is inside one turn, which the page may not show (paged out):
    the page then drops the frame's element (static/conn.js) instead of reporting it."""
    mark = " data-turn-part" if turn_part else ""
    return f'<div id="{target_id}" hx-swap-oob="beforeend"{mark}>{inner}</div>'


def append_frame(target_id: str, text: str) -> str:
    """A data frame (JSON, not HTML): the page appends `text` to `#target_id` as text."""
    return json.dumps({"frame": "append", "id": target_id, "text": text}, ensure_ascii=False)


def toast(message: str, level: str = "error") -> str:
    return oob_append("toasts", render("_toast.html", message=message, level=level))


def instructions_chip(v: View) -> str:
    """The header's instructions chip as the event's reads have it (none read: nothing)."""
    shown = v.reads.get("instructions")
    return "" if shown is None else render("_instructions_chip.html", instructions=shown,
                                           oob=True)


def run_state(running: list[str]) -> str:
    """`#run-state` (the Stop button) for the live runs the user watches."""
    return render("_runstate.html", running=running)


def session_list(rows: list[SessionRowView], current_id: str) -> str:
    return render("_session_list.html", sessions=rows, current_id=current_id)


def turn_from_event(data: EventData, streaming: bool) -> TranscriptItem:
    """The turn an event's payload describes, with the chips (`files`) and the `‹ 2/3 ›`
    place (`siblings`) the core published with it."""
    messages = data.get("messages") or []
    run = data.get("run") or RunSummary()
    turns = sessions.build_turns(messages, {data["run_id"]: run})
    found = next((t for t in turns if t["type"] == "turn"), None)
    turn: TranscriptItem = found if found is not None else {
        "type": "turn", "run_id": data["run_id"], "user": None, "parts": [], "run": run}
    turn["streaming"] = streaming
    if "siblings" in data:
        turn["siblings"] = data["siblings"]
    if "files" in data:
        turn["files"] = data["files"]
    return turn


def order_by_lineage(rows: list[SessionRow]) -> list[SessionRowView]:
    """Newest first, each fork right under its parent with a depth for indentation."""
    by_id = {r["session_id"]: cast(SessionRowView, r.copy()) for r in rows}  # depth below
    children: dict[str | None, list[SessionRowView]] = {}
    for row in by_id.values():
        parent = row.get("forked_from_session_id")
        children.setdefault(parent if parent in by_id else None, []).append(row)
    out: list[SessionRowView] = []

    def visit(parent: str | None, depth: int) -> None:
        for row in sorted(children.get(parent, []), key=lambda r: r["created_at"], reverse=True):
            row["depth"] = depth
            out.append(row)
            visit(row["session_id"], depth + 1)

    visit(None, 0)
    return out
