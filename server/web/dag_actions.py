"""Socket actions and HTTP endpoints for sub-agents, merges and the DAG (DESIGN §5): each
parses, calls one core function, and returns its data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from ..core import dag, merge, subagents
from .api import body

if TYPE_CHECKING:
    from .actions import ActionContext, Handler


def parent_param(p: dict[str, Any]) -> object:
    # `parent_msg_id` is accepted as an alias of `parent_turn_id`.
    return p["parent_turn_id"] if "parent_turn_id" in p else p.get("parent_msg_id")


def label_param(p: dict[str, Any]) -> object:
    label = p.get("label")
    return None if label == "" else label  # the page's empty label field


async def spawn_sub_agent(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await subagents.spawn_sub_agent(ctx.braid, ctx.user_id, ctx.session_id,
                                           parent_param(p), p.get("prompt"), label_param(p))


async def merge_branches(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    branches = p.get("branches")
    if ctx.fmt == "html" and isinstance(branches, str):
        branches = [branches]  # an htmx form sends one ticked box as a string
    return await merge.merge_branches(ctx.braid, ctx.user_id, ctx.session_id, branches,
                                      p.get("message"), p.get("strategy"))


async def get_dag(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await dag.get_dag(ctx.braid, ctx.user_id, ctx.session_id)


DAG_ACTIONS: dict[str, Handler] = {
    "spawn_sub_agent": spawn_sub_agent,
    "merge_branches": merge_branches,
    "get_dag": get_dag,
}


# -- HTTP: POST /api/sessions/{id}/sub_agents | /merge, GET /api/sessions/{id}/dag ---------


async def api_spawn(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await subagents.spawn_sub_agent(request.app.state.braid, user_id,
                                           request.path_params["session_id"],
                                           parent_param(data), data.get("prompt"),
                                           data.get("label"))


async def api_merge(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await merge.merge_branches(request.app.state.braid, user_id,
                                      request.path_params["session_id"], data.get("branches"),
                                      data.get("message"), data.get("strategy"))


async def api_dag(request: Request, user_id: str) -> Any:
    return await dag.get_dag(request.app.state.braid, user_id, request.path_params["session_id"])
