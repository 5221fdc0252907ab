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

from ..core.braid import Braid
from ..core.settings import Settings
from . import api, pages
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
                    (b"referrer-policy", b"no-referrer"),
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
        Route("/s/{session_id}", pages.session_page),
        Route("/s/{session_id}/transcript", pages.transcript_fragment),
        Route("/api/sessions", api.endpoint(api.create_session, 201), methods=["POST"]),
        Route("/api/sessions", api.endpoint(api.list_sessions), methods=["GET"]),
        Route("/api/sessions/{session_id}", api.endpoint(api.get_session)),
        Route("/api/sessions/{session_id}/runs", api.endpoint(api.post_run), methods=["POST"]),
        Route("/api/sessions/{session_id}/dag", api.endpoint(api.get_dag)),
        Route("/api/runs/{run_id}", api.endpoint(api.get_run)),
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
        if token and settings.token is None:
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
            print(f"Braid is running. Open: http://{host}:{settings.port}/login?token={token}",
                  flush=True, file=sys.stdout)
        try:
            yield
        finally:
            await braid.stop()

    app = Starlette(routes=routes(), middleware=[Middleware(SecurityHeaders)],
                    lifespan=lifespan)
    app.state.braid = braid
    return app
