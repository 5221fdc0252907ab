"""The Starlette application, declared as data: routes, mounts, lifespan."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.app import runinfo
from server.app.braid import Braid
from server.base.errors import BraidError
from server.base.settings import Settings
from server.web import (
    errors,
    file_actions,
    import_views,
    model_actions,
    pages,
    transcript_pages,
)
from server.web.actions import SPECS
from server.web.auth import (
    CookieOriginMiddleware,
    Endpoint,
    TokenBackend,
    api_401,
    empty_401,
    login_required,
    to_login,
)
from server.web.render import dag, highlight
from server.web.render.templating import ROOT
from server.web.specs import http_routes
from server.web.ws import session_socket

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


def page(endpoint: Endpoint) -> Endpoint:
    """A page or a form post: a caller without a valid token goes to the login page."""
    return login_required(to_login, endpoint)


def partial(endpoint: Endpoint) -> Endpoint:
    """A partial the page fetches: an empty 401 without a valid token."""
    return login_required(empty_401, endpoint)


def routes() -> list[Route | WebSocketRoute | Mount]:
    """The route table; each route's login requirement is declared here (`page`, `partial`,
    the JSON API's `api_401`), the socket checks its own (`ws._open`)."""
    modules = ROOT / "node_modules"
    return [
        Route("/", page(pages.home)),
        Route("/login", pages.login, methods=["GET", "POST"]),
        Route("/logout", pages.logout, methods=["POST"]),  # a link or an image cannot
        Route("/sessions", page(pages.new_session), methods=["POST"]),
        Route("/sessions/list", partial(pages.session_list)),
        Route("/sessions/import", page(import_views.new_from), methods=["POST"]),
        Route("/s/{session_id}", page(pages.session_page)),
        Route("/s/{session_id}/delete", page(pages.delete_page), methods=["POST"]),
        Route("/api/sessions/{session_id}/files", login_required(api_401, file_actions.api_upload),
              methods=["POST"]),
        Route("/s/{session_id}/files", partial(file_actions.files_fragment)),
        Route("/s/{session_id}/files/view", partial(file_actions.file_view)),
        Route("/highlight.css", highlight.stylesheet_route),
        Route("/s/{session_id}/dag", partial(dag.dag_fragment)),
        Route("/s/{session_id}/turns", partial(transcript_pages.older_turns)),
        Route("/s/{session_id}/notes/{message_id}", partial(transcript_pages.note_text)),
        Route("/s/{session_id}/dag/node/{commit_id}", partial(dag.node_fragment)),
        Route("/s/{session_id}/fork", page(pages.fork_page), methods=["POST"]),
        Route("/s/{session_id}/model", partial(model_actions.picker_fragment)),
        Route("/s/{session_id}/tools", partial(model_actions.tools_fragment)),
        Route("/connections", partial(model_actions.connections_fragment)),
        *http_routes(SPECS),  # the JSON API: one route per declared action
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

    app = Starlette(routes=routes(),
                    middleware=[Middleware(SecurityHeaders),
                                Middleware(AuthenticationMiddleware, backend=TokenBackend()),
                                Middleware(CookieOriginMiddleware)],
                    exception_handlers={BraidError: errors.braid_error,
                                        HTTPException: errors.http_error,
                                        Exception: errors.server_error},
                    lifespan=lifespan)
    app.state.braid = braid
    return app
