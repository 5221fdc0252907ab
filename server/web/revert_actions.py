"""Socket actions and HTTP endpoints for reverting turns (DESIGN §5): each parses, calls one
core function in `server.core.revert`, and returns its data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from ..core import revert
from .api import body

if TYPE_CHECKING:
    from .actions import ActionContext, Handler


def turn_param(p: dict[str, Any]) -> object:
    # `assistant_msg_id` is the protocol's alias of `turn_id` (DESIGN §2).
    return p["turn_id"] if "turn_id" in p else p.get("assistant_msg_id")


async def list_turn_files(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await revert.list_turn_files(ctx.braid, ctx.user_id, ctx.session_id, turn_param(p))


async def turn_diff(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await revert.turn_diff(ctx.braid, ctx.user_id, ctx.session_id, turn_param(p),
                                  p.get("path"))


async def revert_turn(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await revert.revert_turn(ctx.braid, ctx.user_id, ctx.session_id, turn_param(p),
                                    p.get("force"))


async def unrevert_turn(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await revert.unrevert_turn(ctx.braid, ctx.user_id, ctx.session_id, turn_param(p),
                                      p.get("force"))


REVERT_ACTIONS: dict[str, Handler] = {
    "list_turn_files": list_turn_files,
    "turn_diff": turn_diff,
    "revert_turn": revert_turn,
    "unrevert_turn": unrevert_turn,
}


# -- HTTP: GET /api/turns/{turn_id}/files|diff?session_id=, POST .../revert|unrevert ---------


async def api_turn_files(request: Request, user_id: str) -> Any:
    return await revert.list_turn_files(request.app.state.braid, user_id,
                                        request.query_params.get("session_id"),
                                        request.path_params["turn_id"])


async def api_turn_diff(request: Request, user_id: str) -> Any:
    return await revert.turn_diff(request.app.state.braid, user_id,
                                  request.query_params.get("session_id"),
                                  request.path_params["turn_id"],
                                  request.query_params.get("path"))


async def api_revert(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await revert.revert_turn(request.app.state.braid, user_id, data.get("session_id"),
                                    request.path_params["turn_id"], data.get("force"))


async def api_unrevert(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await revert.unrevert_turn(request.app.state.braid, user_id,
                                      data.get("session_id"), request.path_params["turn_id"],
                                      data.get("force"))
