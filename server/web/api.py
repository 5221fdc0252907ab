"""The HTTP JSON API (DESIGN §5): the same core calls as the socket's actions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core import sessions
from ..core.errors import BadRequest, BraidError
from . import hostile
from .auth import check_cookie_request, require_user
from .errors import error_response

Endpoint = Callable[[Request, str], Awaitable[Any]]


async def body(request: Request) -> dict[str, Any]:
    # Read while it streams in, capped: a 200 MB body is refused, never held in memory.
    raw = await hostile.read_capped(request.stream(), request.headers.get("content-length"))
    if not raw:
        return {}
    data = hostile.loads(raw, "body")
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def endpoint(fn: Endpoint, status: int = 200) -> Callable[[Request], Awaitable[Response]]:
    """Authenticate, call, and map domain errors to statuses in one place."""

    async def handler(request: Request) -> Response:
        try:
            user_id = require_user(request)
            check_cookie_request(request, request.method)
            return JSONResponse(await fn(request, user_id), status_code=status)
        except BraidError as e:
            return error_response(e)

    return handler


async def create_session(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await sessions.create_session(request.app.state.braid, user_id, data.get("title"),
                                         data.get("source"), data.get("model"))


async def list_sessions(request: Request, user_id: str) -> Any:
    archived = request.query_params.get("archived", "") in ("1", "true")
    rows = await sessions.list_sessions(request.app.state.braid, user_id,
                                        request.query_params.get("q", ""), archived)
    return {"sessions": rows}


async def get_session(request: Request, user_id: str) -> Any:
    return await sessions.session_info(request.app.state.braid, user_id,
                                       request.path_params["session_id"])


async def post_run(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await sessions.run_to_end(request.app.state.braid, user_id,
                                     request.path_params["session_id"], data.get("input"))


def required_query(request: Request, name: str) -> str:
    """A query parameter the route cannot do without: missing is bad_request, not not_found."""
    value = request.query_params.get(name)
    if not value:
        raise BadRequest(f"the query parameter {name} is required")
    return value


async def get_run(request: Request, user_id: str) -> Any:
    return await sessions.get_run(request.app.state.braid, user_id,
                                  required_query(request, "session_id"),
                                  request.path_params["run_id"])
