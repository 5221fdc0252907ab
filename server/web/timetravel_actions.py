"""The page's Fork session button (a plain form post that opens the new session). The
time-travel actions themselves (`continue_run`, `list_checkpoints`, `fork_session`) are
declared in actions.py."""

from __future__ import annotations

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..core import fork
from ..core.errors import BraidError
from .auth import origin_allowed, user_of
from .errors import status_of


async def fork_page(request: Request) -> Response:
    user_id = user_of(request)
    if user_id is None:
        return RedirectResponse("/login", status_code=303)
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    try:
        made = await fork.fork_session(request.app.state.braid, user_id,
                                       request.path_params["session_id"])
    except BraidError as e:
        return HTMLResponse(str(escape(e.message)), status_code=status_of(e))
    return RedirectResponse(f"/s/{made['session_id']}", status_code=303)
