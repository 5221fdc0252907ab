"""The transcript's older turns (DESIGN §8): the page shows the newest turns of the branch and
loads older ones as the user scrolls up, so its size does not grow with the chat."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from server.base.errors import BadRequest, NotFound
from server.features import sessions
from server.web import params
from server.web.auth import user_of
from server.web.render.events import transcript_with_children
from server.web.render.markdown import render_markdown
from server.web.render.templating import render


async def older_turns(request: Request) -> Response:
    """`GET /s/{id}/turns?before=N[&run=R]`: the turns before the branch's message N (down to
    run R's turn, a search result's), under the marker that loads the ones before them."""
    braid = request.app.state.braid
    user_id = user_of(request)
    try:
        before = params.message_number(request.query_params.get("before"))
        commit = params.commit_id(request.query_params.get("commit"))
        run = request.query_params.get("run") or None
        view = await transcript_with_children(braid, user_id,
                                              request.path_params["session_id"],
                                              before=before, commit=commit, down_to=run)
    except NotFound:
        return HTMLResponse("", status_code=404)
    except BadRequest as e:
        return HTMLResponse(e.message, status_code=400)
    html = render("_older_turns.html", transcript=view) if view["has_more"] else ""
    return HTMLResponse(html + render("_transcript_items.html", transcript=view))


async def note_text(request: Request) -> Response:
    """`GET /s/{id}/notes/{message_id}`: a compaction's summary, as the divider shows it once
    opened (the page draws it folded and empty: _note.html)."""
    try:
        message_id = params.message_id("message_id", "note")(request.path_params["message_id"])
        found = await sessions.note(request.app.state.braid, user_of(request),
                                    request.path_params["session_id"], message_id)
    except NotFound:
        return HTMLResponse("", status_code=404)
    except BadRequest as e:
        return HTMLResponse(e.message, status_code=400)
    return HTMLResponse(render_markdown(str(found.get("content") or "")))
