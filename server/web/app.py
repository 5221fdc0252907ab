"""The Starlette application, declared as data: routes, mounts, lifespan."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import runinfo
from ..core.braid import Braid
from ..core.settings import Settings
from . import (
    api,
    dag_actions,
    dag_views,
    file_actions,
    highlight,
    import_actions,
    import_views,
    model_actions,
    pages,
    revert_actions,
    session_actions,
    timetravel_actions,
    transcript_pages,
)
from .templating import ROOT
from .ws import session_socket

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    # Not no-referrer: under it Chromium sends `Origin: null` on same-site
                    # form posts, which the cross-site form check must refuse.
                    (b"referrer-policy", b"same-origin"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def routes() -> list[Route | WebSocketRoute | Mount]:
    modules = ROOT / "node_modules"
    return [
        Route("/", pages.home),
        Route("/login", pages.login, methods=["GET", "POST"]),
        Route("/logout", pages.logout, methods=["POST", "GET"]),
        Route("/sessions", pages.new_session, methods=["POST"]),
        Route("/sessions/list", pages.session_list),
        Route("/sessions/import", import_views.new_from, methods=["POST"]),
        Route("/s/{session_id}", pages.session_page),
        Route("/api/sessions", api.endpoint(api.create_session, 201), methods=["POST"]),
        Route("/api/sessions", api.endpoint(api.list_sessions), methods=["GET"]),
        Route("/api/sessions/{session_id}", api.endpoint(api.get_session)),
        Route("/api/sessions/{session_id}", api.endpoint(session_actions.api_patch),
              methods=["PATCH"]),
        Route("/api/sessions/{session_id}", session_actions.api_delete, methods=["DELETE"]),
        Route("/s/{session_id}/delete", session_actions.delete_page, methods=["POST"]),
        Route("/api/sessions/{session_id}/files", file_actions.api_files),
        Route("/api/sessions/{session_id}/files", file_actions.api_upload, methods=["POST"]),
        Route("/api/sessions/{session_id}/workdir.zip", file_actions.api_zip),
        Route("/s/{session_id}/files", file_actions.files_fragment),
        Route("/s/{session_id}/files/view", file_actions.file_view),
        Route("/highlight.css", highlight.stylesheet_route),
        Route("/api/sessions/{session_id}/runs", api.endpoint(api.post_run), methods=["POST"]),
        Route("/api/sessions/{session_id}/dag", api.endpoint(dag_actions.api_dag)),
        Route("/api/sessions/{session_id}/sub_agents", api.endpoint(dag_actions.api_spawn),
              methods=["POST"]),
        Route("/api/sessions/{session_id}/merge", api.endpoint(dag_actions.api_merge),
              methods=["POST"]),
        Route("/s/{session_id}/dag", dag_views.dag_fragment),
        Route("/s/{session_id}/turns", transcript_pages.older_turns),
        Route("/s/{session_id}/dag/node/{commit_id}", dag_views.node_fragment),
        Route("/api/runs/{run_id}", api.endpoint(api.get_run)),
        Route("/api/turns/{turn_id}/files", api.endpoint(revert_actions.api_turn_files)),
        Route("/api/turns/{turn_id}/diff", api.endpoint(revert_actions.api_turn_diff)),
        Route("/api/turns/{turn_id}/revert", api.endpoint(revert_actions.api_revert),
              methods=["POST"]),
        Route("/api/turns/{turn_id}/unrevert", api.endpoint(revert_actions.api_unrevert),
              methods=["POST"]),
        Route("/api/runs/{run_id}/continue", api.endpoint(timetravel_actions.api_continue),
              methods=["POST"]),
        Route("/api/runs/{run_id}/checkpoints",
              api.endpoint(timetravel_actions.api_checkpoints)),
        Route("/api/sessions/{session_id}/fork", api.endpoint(timetravel_actions.api_fork, 201),
              methods=["POST"]),
        Route("/s/{session_id}/fork", timetravel_actions.fork_page, methods=["POST"]),
        Route("/api/models", api.endpoint(model_actions.api_models)),
        Route("/s/{session_id}/model", model_actions.picker_fragment),
        Route("/api/sessions/{session_id}/export", api.endpoint(import_actions.api_export),
              methods=["POST"]),
        Route("/api/sessions/{session_id}/update_from_source",
              api.endpoint(import_actions.api_update), methods=["POST"]),
        WebSocketRoute("/ws/sessions/{session_id}", session_socket),
        Mount("/static", StaticFiles(directory=str(ROOT / "static")), name="static"),
        Mount("/vendor/htmx", StaticFiles(directory=str(modules / "htmx.org" / "dist"),
                                          check_dir=False)),
        Mount("/vendor/htmx-ext-ws", StaticFiles(directory=str(modules / "htmx-ext-ws" / "dist"),
                                                 check_dir=False)),
    ]


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings.from_env()
    braid = Braid(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        token = await braid.start()
        runinfo.write(braid.data_dir, settings.host, settings.port)  # for `braid open`
        if settings.token is None:
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
            print(f"Braid is running. Open: http://{host}:{settings.port}/login?token={token}",
                  flush=True, file=sys.stdout)
        try:
            yield
        finally:
            runinfo.clear(braid.data_dir)
            await braid.stop()

    app = Starlette(routes=routes(), middleware=[Middleware(SecurityHeaders)],
                    lifespan=lifespan)
    app.state.braid = braid
    return app
