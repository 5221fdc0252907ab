"""Token auth: a login URL sets a cookie for the browser; scripts send a Bearer token.
A WebSocket whose Origin names another host is refused (cross-site WebSocket hijacking)."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from ..core.errors import Unauthorized

COOKIE = "braid_token"


def token_of(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return conn.cookies.get(COOKIE) or None


def user_of(conn: HTTPConnection) -> str | None:
    users = conn.app.state.braid.users
    return users.authenticate(token_of(conn))


def require_user(conn: HTTPConnection) -> str:
    user_id = user_of(conn)
    if user_id is None:
        raise Unauthorized("a valid token is required")
    return user_id


def origin_allowed(conn: HTTPConnection) -> bool:
    """No Origin (a script) is fine; a browser's Origin must name this very host."""
    origin = conn.headers.get("origin")
    if not origin:
        return True
    host = conn.headers.get("host", "")
    return urlsplit(origin).netloc.lower() == host.lower()
