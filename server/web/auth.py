"""Token auth: a login URL sets a cookie for the browser; scripts send a Bearer token.

A browser attaches the cookie to requests any page makes, so every request the cookie
authenticates and that changes something (a form, a JSON API call, a WebSocket) must come
from this very origin: scheme, host and port (cross-site request forgery and WebSocket
hijacking). A Bearer token is something a foreign page cannot attach; a client without an
Origin (a script) is accepted when its token is valid."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from ..core.errors import Forbidden, Unauthorized

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
    users = conn.app.state.braid.users
    return users.authenticate(token_of(conn))


def require_user(conn: HTTPConnection) -> str:
    user_id = user_of(conn)
    if user_id is None:
        raise Unauthorized("a valid token is required")
    return user_id


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


def check_cookie_request(conn: HTTPConnection, method: str) -> None:
    """Refuse (`forbidden`) a cookie-authenticated request that changes something and comes
    from another origin. Bearer requests are not affected."""
    if method in SAFE_METHODS or bearer_of(conn) is not None:
        return
    if conn.cookies.get(COOKIE) and not origin_allowed(conn):
        raise Forbidden("cross-origin request refused")
