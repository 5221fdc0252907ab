"""Frames for htmx: each socket frame is HTML whose top-level elements the ws extension swaps
out of band by id. The partials are the ones the page itself includes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from markupsafe import escape

from ..core import sessions
from . import model_actions
from .dag_views import DAG_ERRORS, DAG_EVENTS, DAG_RESULTS, dag_changed, is_sub_agent_run
from .import_views import IMPORT_ERRORS, IMPORT_RESULTS
from .names import load_names
from .render_composer import COMPOSER_ERRORS, COMPOSER_RESULTS
from .render_revert import REVERT_ERRORS, REVERT_EVENTS, REVERT_RESULTS, files_for
from .render_session import SESSION_EVENTS, SESSION_RESULTS
from .render_timetravel import TIMETRAVEL_EVENTS, with_siblings
from .templating import dom_id, render

if TYPE_CHECKING:
    from .actions import ActionContext

Renderer = Callable[["HtmlRenderer", dict[str, Any]], Awaitable[str]]


def oob_append(target_id: str, inner: str) -> str:
    # beforeend appends the wrapper's children to the element with the wrapper's id.
    return f'<div id="{target_id}" hx-swap-oob="beforeend">{inner}</div>'


def turn_from_event(data: dict[str, Any], streaming: bool) -> dict[str, Any]:
    messages = data.get("messages") or []
    turns = sessions.build_turns(messages, {data["run_id"]: data.get("run") or {}})
    turn = next((t for t in turns if t["type"] == "turn"), None)
    if turn is None:
        turn = {"type": "turn", "run_id": data["run_id"], "user": None, "parts": [],
                "run": data.get("run") or {}}
    turn["streaming"] = streaming
    return turn


class HtmlRenderer:
    def __init__(self, ctx: ActionContext) -> None:
        self.ctx = ctx

    @staticmethod
    def toast(message: str, level: str = "error") -> str:
        item = render("_toast.html", message=message, level=level)
        return oob_append("toasts", item)

    async def render(self, frame: dict[str, Any]) -> str:
        kind = frame.get("type")
        if frame.get("event") != "message_delta":  # deltas name nothing; they come often
            await load_names(self.ctx.braid, self.ctx.session_id)
        if kind == "error":
            on_error = ERRORS.get(frame.get("action") or "")
            return await on_error(self, frame["error"]) if on_error else \
                self.toast(frame["error"]["message"])
        if kind == "result":
            fn = RESULTS.get(frame.get("action") or "")
            return await fn(self, frame["data"]) if fn else ""
        fn = EVENTS.get(frame.get("event") or "")
        return await fn(self, frame["data"]) if fn else ""

    async def run_state(self) -> str:
        live = self.ctx.braid.runs.foreground(self.ctx.session_id)
        return render("_runstate.html", running=[a.run_id for a in live])

    async def session_list(self) -> str:
        from .pages import order_by_lineage

        rows = await sessions.list_sessions(self.ctx.braid, self.ctx.user_id)
        return render("_session_list.html", sessions=order_by_lineage(rows),
                      current_id=self.ctx.session_id)

    async def transcript(self) -> str:
        view = await sessions.transcript(self.ctx.braid, self.ctx.user_id, self.ctx.session_id)
        return render("_transcript.html", transcript=view)


async def _run_started(r: HtmlRenderer, data: dict[str, Any]) -> str:
    if is_sub_agent_run(data):  # it streams into its card in the DAG panel instead
        return await r.run_state()
    turn = await with_siblings(r, turn_from_event(data, streaming=True))
    meta = r.ctx.braid.store.get(r.ctx.session_id).meta
    return (oob_append("transcript", render("_turn.html", turn=turn))
            + render("_title.html", title=meta.get("title"))
            + (await r.session_list() if data.get("titled") else "")
            + await r.run_state())


async def _delta(r: HtmlRenderer, data: dict[str, Any]) -> str:
    return oob_append(f"live-{dom_id(data['run_id'])}", f"<span>{escape(data['delta'])}</span>")


async def _tool_call(r: HtmlRenderer, data: dict[str, Any]) -> str:
    card = render("_tool_card.html", run_id=data["run_id"], call=data["call"], result=None)
    return oob_append(f"parts-{dom_id(data['run_id'])}", card)


async def _tool_result(r: HtmlRenderer, data: dict[str, Any]) -> str:
    msg = data["message"]
    call = {"id": msg.get("tool_call_id"), "function": {"name": msg.get("name"),
                                                         "arguments": "{}"}}
    # Replace only the card's status and result; the arguments shown stay as they were.
    return render("_tool_result.html", run_id=data["run_id"], call=call, result=msg)


async def _run_done(r: HtmlRenderer, data: dict[str, Any]) -> str:
    if is_sub_agent_run(data):  # sub_agent_done redraws its card
        return await r.run_state()
    turn = await with_siblings(r, turn_from_event(data, streaming=False))
    turn["files"] = await files_for(r, data)  # the file chips arrive with the bubble
    html = render("_turn.html", turn=turn)
    html += await r.run_state()
    if data.get("error"):
        html += r.toast(f"Run failed: {data['error']}")
    return html + await model_actions.session_tokens(r)


async def _session_changed(r: HtmlRenderer, data: dict[str, Any]) -> str:
    html = await r.transcript() + await r.run_state()
    if data.get("branch"):
        html += render("_branch.html", branch=data["branch"])
    return html + await dag_changed(r, data)  # the graph marks the branch shown


EVENTS: dict[str, Renderer] = {
    "run_started": _run_started,
    "message_delta": _delta,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "run_completed": _run_done,
    "run_error": _run_done,
    "run_cancelled": _run_done,
    "session_changed": _session_changed,
    **REVERT_EVENTS,
    **DAG_EVENTS,
    **TIMETRAVEL_EVENTS,  # run_continued
    **SESSION_EVENTS,  # session_updated, session_deleted
}

RESULTS: dict[str, Renderer] = {**REVERT_RESULTS, **DAG_RESULTS, **SESSION_RESULTS,
                                 **COMPOSER_RESULTS, **IMPORT_RESULTS}

# Per-action error frames (`error` = {code, message, details?}); the default is a toast.
ERRORS: dict[str, Callable[[HtmlRenderer, dict[str, Any]], Awaitable[str]]] = {
    **REVERT_ERRORS,
    **DAG_ERRORS,
    **IMPORT_ERRORS,  # export_session, update_from_source: shown in #export-result
    **COMPOSER_ERRORS,
}
