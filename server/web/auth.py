"""Token auth: a login URL sets a cookie for the browser; scripts send a Bearer token.

A browser attaches the cookie to requests any page makes, so every request the cookie
authenticates and that changes something (a form, a JSON API call, a WebSocket) must come
from this very origin: scheme, host and port (cross-site request forgery and WebSocket
hijacking). A Bearer token is something a foreign page cannot attach; a client without an
Origin (a script) is accepted when its token is valid."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.errors import BraidError, Forbidden, Unauthorized
from ..core.users import UserStore, off_loop
from .errors import error_response

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


def user_of(conn: HTTPConnection) -> str | None:
    """The caller, as `AuthMiddleware` found it once for this request (None: no valid
    token)."""
    state = conn.scope.get("state") or {}
    if "user_id" in state:
        found: str | None = state["user_id"]
        return found
    users: UserStore = conn.app.state.braid.users
    return users.authenticate(token_of(conn))


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


class AuthMiddleware:
    """Authenticates every request and socket once: the caller's user id goes into the
    scope's state (`user_of` reads it; None when the token is missing or bad). A JSON API
    request (`/api/...`) without a valid token is refused here (401), and so is one that a
    cookie authenticates, changes something, and comes from another origin (403). Pages
    redirect to the login themselves; the socket closes with its own codes (4401, 4403)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or \
                scope["path"].startswith(("/static/", "/vendor/")):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        # Off the event loop: a users backend is a file or a database away.
        user_id = await off_loop(conn.app.state.braid.users).authenticate(token_of(conn))
        scope.setdefault("state", {})["user_id"] = user_id
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            try:
                if user_id is None:
                    raise Unauthorized("a valid token is required")
                check_cookie_request(conn, scope["method"])
            except BraidError as e:
                await error_response(e)(scope, receive, send)
                return
        await self.app(scope, receive, send)
