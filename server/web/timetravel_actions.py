"""Socket actions, HTTP endpoints and the page's form route for time travel (DESIGN §5):
`continue_run`, `list_checkpoints`, `fork_session`. Each parses, calls one core function in
`server.core.timetravel` or `server.core.fork`, and returns its data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..core import fork, timetravel
from ..core.errors import BadRequest, BraidError
from .api import body, required_query
from .auth import origin_allowed, user_of
from .errors import HTTP_STATUS

if TYPE_CHECKING:
    from .actions import ActionContext, Handler

CONTINUE_PARAMS = ("continue_from", "input", "fork", "regenerate", "replace_original")


def run_param(p: dict[str, Any]) -> object:
    # `assistant_msg_id` is the protocol's alias of the run id (DESIGN §2).
    return p["run_id"] if "run_id" in p else p.get("assistant_msg_id")


async def continue_run(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await timetravel.continue_run(ctx.braid, ctx.user_id, ctx.session_id, run_param(p),
                                         **{k: p.get(k) for k in CONTINUE_PARAMS})


async def list_checkpoints(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await timetravel.list_checkpoints(ctx.braid, ctx.user_id, ctx.session_id,
                                             run_param(p))


async def fork_session(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await fork.fork_session(ctx.braid, ctx.user_id, ctx.session_id)


TIMETRAVEL_ACTIONS: dict[str, Handler] = {
    "continue_run": continue_run,
    "list_checkpoints": list_checkpoints,
    "fork_session": fork_session,
}


# -- HTTP: POST /api/runs/{run_id}/continue, GET .../checkpoints, POST /api/sessions/{id}/fork


async def api_continue(request: Request, user_id: str) -> Any:
    """Waits for the continued run to end, as `POST /api/sessions/{id}/runs` does."""
    data = await body(request)
    if data.get("session_id") is None:
        raise BadRequest("the body needs a session_id")
    return await timetravel.continue_run_to_end(
        request.app.state.braid, user_id, data["session_id"], request.path_params["run_id"],
        **{k: data.get(k) for k in CONTINUE_PARAMS})


async def api_checkpoints(request: Request, user_id: str) -> Any:
    return await timetravel.list_checkpoints(request.app.state.braid, user_id,
                                             required_query(request, "session_id"),
                                             request.path_params["run_id"])


async def api_fork(request: Request, user_id: str) -> Any:
    return await fork.fork_session(request.app.state.braid, user_id,
                                   request.path_params["session_id"])


# -- the page's Fork session button: a plain form post that opens the new session ---------


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
        return HTMLResponse(str(escape(e.message)), status_code=HTTP_STATUS.get(e.code, 500))
    return RedirectResponse(f"/s/{made['session_id']}", status_code=303)
