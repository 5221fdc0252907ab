"""The WebSocket action table: `ACTIONS = {name: handler}`. A handler parses its params,
calls one core function and returns the result's `data`; rendering is the transport's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..core import sessions, turns
from ..core.braid import Braid
from .dag_actions import DAG_ACTIONS
from .file_actions import FILE_ACTIONS
from .import_actions import IMPORT_ACTIONS
from .revert_actions import REVERT_ACTIONS
from .session_actions import SESSION_ACTIONS
from .timetravel_actions import TIMETRAVEL_ACTIONS


@dataclass
class ActionContext:
    braid: Braid
    user_id: str
    session_id: str


Handler = Callable[[ActionContext, dict[str, Any]], Awaitable[dict[str, Any]]]


async def send_message(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    run_id = await turns.send_message(ctx.braid, ctx.user_id, ctx.session_id, p.get("text"))
    return {"run_id": run_id}


async def cancel_run(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await turns.cancel_run(ctx.braid, ctx.user_id, ctx.session_id, p.get("run_id"))


async def checkout(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await sessions.checkout(ctx.braid, ctx.user_id, ctx.session_id, p.get("ref"))


ACTIONS: dict[str, Handler] = {
    "send_message": send_message,
    "cancel_run": cancel_run,
    "checkout": checkout,
    **REVERT_ACTIONS,  # list_turn_files, turn_diff, revert_turn, unrevert_turn
    **DAG_ACTIONS,  # spawn_sub_agent, merge_branches, get_dag
    **TIMETRAVEL_ACTIONS,  # continue_run, list_checkpoints, fork_session
    **IMPORT_ACTIONS,  # export_session, update_from_source
    **SESSION_ACTIONS,  # update_session
    **FILE_ACTIONS,  # list_files
}
