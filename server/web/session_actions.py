"""Session settings over the socket and HTTP (DESIGN §5): `update_session` and
`PATCH /api/sessions/{id}` (rename, archive/restore, model), `DELETE /api/sessions/{id}`,
and the page's confirmed delete form. Each parses, calls one core function, returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..core import session_meta
from ..core.errors import BraidError
from .api import body
from .auth import origin_allowed, require_user, user_of
from .errors import HTTP_STATUS, error_response

if TYPE_CHECKING:
    from .actions import ActionContext, Handler


def update_params(p: dict[str, Any]) -> dict[str, Any]:
    return {k: p[k] for k in session_meta.UPDATABLE if k in p}


async def update_session(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await session_meta.update_session(ctx.braid, ctx.user_id, ctx.session_id,
                                             update_params(p))


SESSION_ACTIONS: dict[str, Handler] = {"update_session": update_session}


async def api_patch(request: Request, user_id: str) -> Any:
    return await session_meta.update_session(request.app.state.braid, user_id,
                                             request.path_params["session_id"],
                                             update_params(await body(request)))


async def api_delete(request: Request) -> Response:
    try:
        user_id = require_user(request)
        await session_meta.delete_session(request.app.state.braid, user_id,
                                          request.path_params["session_id"])
    except BraidError as e:
        return error_response(e)
    return Response(status_code=204)


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
        return HTMLResponse(str(escape(e.message)), status_code=HTTP_STATUS.get(e.code, 500))
    return RedirectResponse("/", status_code=303)
