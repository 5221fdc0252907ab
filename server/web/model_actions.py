"""The model picker's web side (DESIGN §5, §8; `GET /api/models` is in actions.py): the
picker partial (`/s/{id}/model`, fetched by the page once it has loaded, since listing asks
each endpoint's `GET /v1/models`), and its HTML frames: a new choice (`update_session`
{model}, see session_meta.py) redraws the picker in every tab (a finished turn's token count is
render_html's). And the tools the model is offered (`/s/{id}/tools`, fetched when the session
menu's Tools opens, since listing may start an MCP server): each switched off or on. And the
user's own connections (`/connections`), the dialog the session menu opens."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from server.agent.turns import own_endpoints
from server.base.errors import NotFound
from server.features import model_choice, session_meta
from server.features.connections import own as own_connections
from server.web.auth import user_of
from server.web.render.templating import render


async def picker_html(braid: Any, user_id: str, session_id: str) -> str:
    handle = braid.store.get_owned(user_id, session_id)
    listed = await model_choice.list_models(braid, user_id)
    now = model_choice.current(braid, handle, await own_endpoints(braid, user_id))
    models = [m for m in listed["models"] if m.get("ref")]
    if now["ref"] not in {m["ref"] for m in models}:
        models.insert(0, {"id": now["id"], "endpoint": now["endpoint"], "ref": now["ref"]})
    down = [m for m in listed["models"] if m.get("error")]
    usage = await model_choice.session_usage(braid, user_id, session_id)
    return render("_model_picker.html", models=models, current=now, down=down, usage=usage,
                  session_id=session_id)


async def picker_fragment(request: Request) -> Response:
    user_id = user_of(request)
    try:
        html = await picker_html(request.app.state.braid, user_id,
                                 request.path_params["session_id"])
    except NotFound:
        return HTMLResponse("", status_code=404)
    return HTMLResponse(html)


async def tools_fragment(request: Request) -> Response:
    braid, user_id = request.app.state.braid, user_of(request)
    try:
        listed = await session_meta.list_tools(braid, user_id, request.path_params["session_id"])
    except NotFound:
        return HTMLResponse("", status_code=404)
    cost = sum(t["tokens"] for t in listed["tools"] if not t["off"])
    return HTMLResponse(render("_tools_panel.html", tools=listed["tools"],
                               unavailable=listed["unavailable"], cost=cost))


async def connections_fragment(request: Request) -> Response:
    """The user's own connections (`/connections`, fetched when the dialog opens)."""
    listed = await own_connections.list_connections(request.app.state.braid, user_of(request))
    return HTMLResponse(render("_connections.html", connections=listed["connections"]))
