"""Small pure pieces the socket renderers share: out-of-band wrappers, toasts, the run state,
the sidebar, and the turn an event's payload describes."""

from __future__ import annotations

from typing import Any

from ..core import sessions
from .templating import render


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
