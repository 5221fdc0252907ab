"""Socket actions and HTTP endpoints for taking work out of a session and following its
source (DESIGN §5 `export_session`, `POST /api/sessions/{id}/export`): each parses, calls
one core function and returns its data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from ..core import exporting, source_sync
from .api import body

if TYPE_CHECKING:
    from .actions import ActionContext, Handler


async def export_session(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await exporting.export_session(ctx.braid, ctx.user_id, ctx.session_id, p.get("to"),
                                          p.get("path"), p.get("force"))


async def update_from_source(ctx: ActionContext, p: dict[str, Any]) -> dict[str, Any]:
    return await source_sync.update_from_source(ctx.braid, ctx.user_id, ctx.session_id)


IMPORT_ACTIONS: dict[str, Handler] = {
    "export_session": export_session,
    "update_from_source": update_from_source,
}


# -- HTTP: POST /api/sessions/{id}/export | /update_from_source ---------------------------


async def api_export(request: Request, user_id: str) -> Any:
    data = await body(request)
    return await exporting.export_session(request.app.state.braid, user_id,
                                          request.path_params["session_id"], data.get("to"),
                                          data.get("path"), data.get("force"))


async def api_update(request: Request, user_id: str) -> Any:
    return await source_sync.update_from_source(request.app.state.braid, user_id,
                                                request.path_params["session_id"])
