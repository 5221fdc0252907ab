"""Small pure pieces the socket renderers share: out-of-band wrappers, toasts, the run state,
the sidebar, and the turn an event's payload describes; and the shapes of the renderers
themselves (`View`, `Renderer`), so the modules that render one action's frames need not
import the table that gathers them (frames.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.features import sessions
from server.web.render.names import Names
from server.web.render.templating import render


@dataclass
class View:
    """One event as its frames render it."""

    data: dict[str, Any]  # the payload
    names: Names  # readable names of the session's branches and runs
    running: list[str]  # the live runs the user watches (the Stop button)
    reads: dict[str, Any] = field(default_factory=dict)  # what LOADS read for this event


class Renderer(Protocol):
    """What a result or error renderer is handed: one connection's `frames.HtmlRenderer`."""

    def toast(self, message: str, level: str = "error") -> str: ...


EventRenderer = Callable[[View], str]
ResultRenderer = Callable[[Renderer, dict[str, Any]], Awaitable[str]]


def oob_append(target_id: str, inner: str) -> str:
    # beforeend appends the wrapper's children to the element with the wrapper's id.
    return f'<div id="{target_id}" hx-swap-oob="beforeend">{inner}</div>'


def toast(message: str, level: str = "error") -> str:
    return oob_append("toasts", render("_toast.html", message=message, level=level))


def run_state(running: list[str]) -> str:
    """`#run-state` (the Stop button) for the live runs the user watches."""
    return render("_runstate.html", running=running)


def session_list(rows: list[dict[str, Any]], current_id: str) -> str:
    return render("_session_list.html", sessions=rows, current_id=current_id)


def turn_from_event(data: dict[str, Any], streaming: bool) -> dict[str, Any]:
    """The turn an event's payload describes, with the chips (`files`) and the `‹ 2/3 ›`
    place (`siblings`) the core published with it."""
    messages = data.get("messages") or []
    turns = sessions.build_turns(messages, {data["run_id"]: data.get("run") or {}})
    turn = next((t for t in turns if t["type"] == "turn"), None)
    if turn is None:
        turn = {"type": "turn", "run_id": data["run_id"], "user": None, "parts": [],
                "run": data.get("run") or {}}
    turn["streaming"] = streaming
    for key in ("siblings", "files"):
        if key in data:
            turn[key] = data[key]
    return turn
