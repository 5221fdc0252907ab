"""The page's plain form posts: the confirmed Delete and the Fork session buttons. The
actions themselves (`update_session`, `fork_session`, ...) are declared in actions.py; a form
post only adds the Origin check forms need and where to go next (the login redirect is
the route table's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.base.errors import BraidError
from server.features import fork, session_meta
from server.web.auth import origin_allowed, user_of
from server.web.errors import status_of

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
