"""HTML frames for session settings: `session_updated` redraws the title, the session menu
and both sidebar lists in every tab; `session_deleted` tells other tabs; the result of
`update_session` confirms with a toast."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import sessions
from . import model_actions
from .templating import render

if TYPE_CHECKING:
    from .render_html import HtmlRenderer

Renderer = Any  # Callable[[HtmlRenderer, dict], Awaitable[str]]; avoids an import cycle


async def archived_list(r: HtmlRenderer) -> str:
    rows = await sessions.list_sessions(r.ctx.braid, r.ctx.user_id, archived=True)
    return render("_archived_list.html", sessions=rows, current_id=r.ctx.session_id)


async def _session_updated(r: HtmlRenderer, data: dict[str, Any]) -> str:
    info = await sessions.session_info(r.ctx.braid, r.ctx.user_id, r.ctx.session_id)
    picker = await model_actions.picker_html(r.ctx.braid, r.ctx.user_id, r.ctx.session_id) \
        if "model" in (data.get("changes") or ()) else ""
    return (render("_title.html", title=info.get("title"))
            + render("_session_menu.html", session=info)
            + await r.session_list() + await archived_list(r) + picker)


async def _session_deleted(r: HtmlRenderer, data: dict[str, Any]) -> str:
    return r.toast("This session was deleted in another tab.")


async def _updated_result(r: HtmlRenderer, data: dict[str, Any]) -> str:
    if data.get("archived"):
        return r.toast("Archived: it is listed under “Archived sessions” in the sidebar.",
                       level="info")
    return ""


async def _uploaded(r: HtmlRenderer, data: dict[str, Any]) -> str:
    """An upload is a turn of its own in the transcript: chips, Revert."""
    from .render_html import oob_append, turn_from_event
    from .render_revert import files_for

    turn = turn_from_event(data, streaming=False)
    turn["files"] = await files_for(r, data)
    return oob_append("transcript", render("_turn.html", turn=turn))


SESSION_EVENTS: dict[str, Renderer] = {
    "files_uploaded": _uploaded,
    "session_updated": _session_updated,
    "session_deleted": _session_deleted,
}
SESSION_RESULTS: dict[str, Renderer] = {"update_session": _updated_result}
