"""The page's confirmed Delete form. The session actions themselves (`update_session`,
`PATCH` and `DELETE /api/sessions/{id}`) are declared in actions.py."""

from __future__ import annotations

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..core import session_meta
from ..core.errors import BraidError
from .auth import origin_allowed, user_of
from .errors import status_of


async def delete_page(request: Request) -> Response:
    """The page's Delete button (after its confirmation dialog): a form post that then
    opens the newest remaining session."""
    user_id = user_of(request)
    if user_id is None:
        return RedirectResponse("/login", status_code=303)
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    try:
        await session_meta.delete_session(request.app.state.braid, user_id,
                                          request.path_params["session_id"])
    except BraidError as e:
        return HTMLResponse(str(escape(e.message)), status_code=status_of(e))
    return RedirectResponse("/", status_code=303)
