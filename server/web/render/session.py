"""HTML frames for session settings: `session_updated` redraws the title, the session menu
and both sidebar lists in every tab; `session_deleted` tells other tabs; the result of
`update_session` confirms with a toast."""

from __future__ import annotations

from server.base.results import SessionInfo
from server.web.render.fragments import (
    Renderer,
    ResultRenderer,
    View,
    oob_append,
    session_list,
    toast,
    turn_from_event,
)
from server.web.render.templating import render


def session_updated(v: View) -> str:
    info, sid = v.reads["info"], v.data["session_id"]
    picker: str = v.reads.get("picker", "")
    return (render("_title.html", title=info.get("title"))
            + render("_session_menu.html", session=info)
            + session_list(v.reads["sessions"], sid)
            + render("_archived_list.html", sessions=v.reads["archived"], current_id=sid)
            + picker)


def session_deleted(v: View) -> str:
    return toast("This session was deleted in another tab.")


async def _updated_result(r: Renderer, data: SessionInfo) -> str:
    if data.get("archived"):
        return r.toast("Archived: it is listed under “Archived sessions” in the sidebar.",
                       level="info")
    return ""


def uploaded(v: View) -> str:
    """An upload is a turn of its own in the transcript: chips (in the payload), Revert."""
    turn = turn_from_event(v.data, streaming=False)
    return oob_append("transcript", render("_turn.html", turn=turn))


SESSION_RESULTS: dict[str, ResultRenderer] = {"update_session": _updated_result}
