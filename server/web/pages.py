"""Page routes: login, the session page, the partials the page fetches over HTTP, and the
page's plain form posts (the confirmed Delete and the Fork session buttons: the actions are
declared in actions.py; a form post only adds the Origin check forms need and where to go
next)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import suppress

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.agent.compaction import run as compaction
from server.base.errors import BadRequest, BraidError, NotFound
from server.base.results import SearchHit
from server.features import fork, queue, search, session_meta, sessions
from server.store.users import off_loop
from server.web import live
from server.web.auth import COOKIE, login_link_allowed, origin_allowed, user_of
from server.web.errors import status_of
from server.web.render.fragments import order_by_lineage
from server.web.render.names import load_names
from server.web.render.templating import templates


def _login_redirect() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def _next_page(value: str | None) -> str:
    """Where a login goes on (`braid open` names the new session): only a session page of
    this site, never another URL."""
    if value and re.fullmatch(r"/s/[0-9a-f]{32}", value):
        return value
    return "/"


async def login(request: Request) -> Response:
    braid = request.app.state.braid
    token = request.query_params.get("token")
    if request.method == "POST":
        if not origin_allowed(request):
            return HTMLResponse("cross-site form refused", status_code=403)
        token = str((await request.form()).get("token") or "")
    if token is None:
        return templates.TemplateResponse(request, "login.html", {"error": None})
    if request.method == "GET" and not login_link_allowed(request):
        return templates.TemplateResponse(request, "login.html", {
            "error": "This login link was opened from another site, so it was not used. "
                     "Open the URL braid serve printed from the address bar, or paste "
                     "its token here."}, status_code=403)
    if await off_loop(braid.users).authenticate(token) is None:
        return templates.TemplateResponse(
            request, "login.html", {"error": "That token is not valid."}, status_code=401
        )
    response = RedirectResponse(_next_page(request.query_params.get("next")), status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="lax", max_age=30 * 86400)
    return response


async def logout(request: Request) -> Response:
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    response = _login_redirect()
    response.delete_cookie(COOKIE)
    return response


async def home(request: Request) -> Response:
    user_id = user_of(request)
    rows = await sessions.list_sessions(request.app.state.braid, user_id)
    if rows:
        return RedirectResponse(f"/s/{rows[0]['session_id']}", status_code=303)
    created = await sessions.create_session(request.app.state.braid, user_id)
    return RedirectResponse(f"/s/{created['session_id']}", status_code=303)


async def new_session(request: Request) -> Response:
    user_id = user_of(request)
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    braid = request.app.state.braid
    here = str((await request.form()).get("from") or "")
    # An untouched "New session" (other than the one shown) is reused: empty sessions must
    # not pile up in the list.
    for row in await sessions.list_sessions(braid, user_id):
        if row["session_id"] != here and not row.get("title") \
                and not row.get("forked_from_session_id") \
                and not await braid.index.list_runs(row["session_id"]):
            return RedirectResponse(f"/s/{row['session_id']}", status_code=303)
    created = await sessions.create_session(braid, user_id)
    return RedirectResponse(f"/s/{created['session_id']}", status_code=303)


async def session_page(request: Request) -> Response:
    braid = request.app.state.braid
    user_id = user_of(request)
    session_id = request.path_params["session_id"]
    try:
        info = await sessions.session_info(braid, user_id, session_id, runs=False)
        # A reload mid-run shows the live turn so far; the socket's catch-up goes on from it.
        view = await live.page_transcript(braid, user_id, session_id, info["branch"])
    except NotFound:  # deleted, or never one of this user's: a page that says so
        return templates.TemplateResponse(request, "gone.html", {}, status_code=404)
    rows = order_by_lineage(await sessions.list_sessions(braid, user_id))
    await load_names(braid, session_id)
    running = [a.run_id for a in braid.runs.foreground(session_id)]
    queued = (await queue.list_queue(braid, user_id, session_id))["queued"]
    shown = await compaction.instructions_in_effect(braid, user_id, session_id)
    return templates.TemplateResponse(request, "session.html", {
        "session": info, "transcript": view, "sessions": rows, "current_id": session_id,
        "running": running, "branch": info["branch"], "queued": queued,
        "instructions": shown,
        "shell_unavailable": braid.settings.shell_unavailable,
    })


async def session_list(request: Request) -> Response:
    user_id = user_of(request)
    query = request.query_params.get("q", "")
    archived = request.query_params.get("archived") == "1"
    found = await sessions.list_sessions(request.app.state.braid, user_id, query, archived)
    rows = order_by_lineage(found) if not query and not archived else found
    hits: list[SearchHit] = []  # the search box finds titles, then words in messages
    if query and not archived:
        with suppress(BadRequest):  # a query too long to search: titles only
            hits = (await search.search(request.app.state.braid, user_id, query))["results"]
    return templates.TemplateResponse(
        request, "_archived_list.html" if archived else "_session_list.html",
        {"sessions": rows, "current_id": request.query_params.get("current", ""),
         "query": query, "hits": hits})


# -- the page's plain form posts ------------------------------------------------------------

# Runs the action for (request, user_id) and returns the address to open afterwards.
FormAction = Callable[[Request, str], Awaitable[str]]


async def _form_post(request: Request, action: FormAction) -> Response:
    user_id = user_of(request)
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    try:
        url = await action(request, user_id)
    except BraidError as e:
        return HTMLResponse(str(escape(e.message)), status_code=status_of(e))
    return RedirectResponse(url, status_code=303)


async def _delete(request: Request, user_id: str) -> str:
    await session_meta.delete_session(request.app.state.braid, user_id,
                                      request.path_params["session_id"])
    return "/"  # the newest remaining session


async def _fork(request: Request, user_id: str) -> str:
    made = await fork.fork_session(request.app.state.braid, user_id,
                                   request.path_params["session_id"])
    return f"/s/{made['session_id']}"


async def delete_page(request: Request) -> Response:
    return await _form_post(request, _delete)


async def fork_page(request: Request) -> Response:
    return await _form_post(request, _fork)
