"""Token auth: a login URL sets a cookie for the browser; scripts send a Bearer token.

A browser attaches the cookie to requests any page makes, so every request the cookie
authenticates and that changes something (a form, a JSON API call, a WebSocket) must come
from this very origin: scheme, host and port (cross-site request forgery and WebSocket
hijacking). A Bearer token is something a foreign page cannot attach; a client without an
Origin (a script) is accepted when its token is valid.

Identity is Starlette's: `AuthenticationMiddleware` asks `TokenBackend` once per request and
socket; the route table declares each route's login requirement (`login_required` with the
route's refusal: the login page, an empty 401, the JSON API's 401). The Origin check of the
JSON API is its own middleware (`CookieOriginMiddleware`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    BaseUser,
    SimpleUser,
    has_required_scope,
)
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from server.base.errors import BraidError, Forbidden, Unauthorized
from server.store.users import off_loop
from server.web.errors import error_response

COOKIE = "braid_token"
DEFAULT_PORTS = {"http": 80, "https": 443}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def bearer_of(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


def token_of(conn: HTTPConnection) -> str | None:
    return bearer_of(conn) or conn.cookies.get(COOKIE) or None


def user_of(conn: HTTPConnection) -> str:
    """The caller's user id, as `TokenBackend` found it once for this request; only for
    routes declared `login_required` (and the socket once it checked `signed_in`)."""
    assert conn.user.is_authenticated
    return str(conn.user.identity)


def signed_in(conn: HTTPConnection) -> bool:
    return has_required_scope(conn, ["authenticated"])


def _origin_of(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        if scheme not in DEFAULT_PORTS or not parts.hostname:
            return None
        return scheme, parts.hostname.lower(), parts.port or DEFAULT_PORTS[scheme]
    except ValueError:  # a port that is not a number
        return None


def origin_allowed(conn: HTTPConnection) -> bool:
    """No Origin (a script) is fine; a browser's Origin must be this very origin: the same
    scheme, host and port the request was made to (`null` and garbage are refused)."""
    origin = conn.headers.get("origin")
    if not origin:
        return conn.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    theirs = _origin_of(origin)
    ours = _origin_of(f"{conn.url.scheme}://{conn.headers.get('host', '')}")
    return theirs is not None and theirs == ours


def login_link_allowed(conn: HTTPConnection) -> bool:
    """A login link (`GET /login?token=`) sets the cookie only when the user opened it
    (typed or pasted into the address bar, a bookmark: `Sec-Fetch-Site: none`; or a client
    that sends no such header), never when another site's page led there: that login CSRF
    would put the victim in the attacker's account, typing into the attacker's sessions.
    Another port of the same host is another site here too (browsers call it same-site)."""
    site = conn.headers.get("sec-fetch-site")
    if site is not None and site not in ("none", "same-origin"):
        return False
    ours = _origin_of(f"{conn.url.scheme}://{conn.headers.get('host', '')}")
    for header in ("origin", "referer"):
        value = conn.headers.get(header)
        if value and _origin_of(value) != ours:
            return False
    return True


def check_cookie_request(conn: HTTPConnection, method: str) -> None:
    """Refuse (`forbidden`) a cookie-authenticated request that changes something and comes
    from another origin. Bearer requests are not affected."""
    if method in SAFE_METHODS or bearer_of(conn) is not None:
        return
    if conn.cookies.get(COOKIE) and not origin_allowed(conn):
        raise Forbidden("cross-origin request refused")


class TokenBackend(AuthenticationBackend):
    """Starlette's `AuthenticationMiddleware` asks it once per request and socket: the user
    of the Bearer token or the login cookie (`request.user`, scope `authenticated`), or no
    one (a missing or bad token, and static files, which need none)."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        if conn.scope["path"].startswith(("/static/", "/vendor/")):
            return None
        # Off the event loop: a users backend is a file or a database away.
        user_id = await off_loop(conn.app.state.braid.users).authenticate(token_of(conn))
        if user_id is None:
            return None
        return AuthCredentials(["authenticated"]), SimpleUser(user_id)


class CookieOriginMiddleware:
    """A JSON API request (`/api/...`) that the login cookie authenticates, changes something,
    and comes from another origin is refused here (403), before any route sees it. Runs after
    `AuthenticationMiddleware`: a caller without a valid token is left to its route's 401.
    Pages and the socket check the Origin themselves (their refusals differ)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            conn = HTTPConnection(scope)
            try:
                if signed_in(conn):
                    check_cookie_request(conn, scope["method"])
            except BraidError as e:
                await error_response(e)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# What a route answers a caller without a valid token (`login_required`).
Refusal = Callable[[Request], Response]


def to_login(request: Request) -> Response:
    """A page: the login page."""
    return RedirectResponse("/login", status_code=303)


def empty_401(request: Request) -> Response:
    """A partial the page fetches: nothing to swap in."""
    return HTMLResponse("", status_code=401)


def api_401(request: Request) -> Response:
    """A JSON API call: `{"error": {"code": "unauthorized", ...}}` (the app's handler)."""
    raise Unauthorized("a valid token is required")


Endpoint = Callable[[Request], Awaitable[Response]]


def login_required(refuse: Refusal, endpoint: Endpoint) -> Endpoint:
    """`endpoint` behind the login, declared in the route table (Starlette's `requires`,
    with this app's refusal for each kind of route): it runs only for a signed-in caller,
    who `user_of` then names."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        if not signed_in(request):
            return refuse(request)
        return await endpoint(request)

    return guarded
