"""Identifiers. Session ids are unguessable (they appear in URLs); message ids are random too,
so a forked session can share them without collisions."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
_MESSAGE_ID = re.compile(r"^[0-9a-f]{32}$")


def new_session_id() -> str:
    return secrets.token_hex(16)


def new_message_id() -> str:
    return secrets.token_hex(16)


def new_queued_id() -> str:
    """A queued message's id: unguessable (it is all a client names the message by), and the
    run id of the turn the message starts (so recovery can tell whether it started)."""
    return secrets.token_hex(16)


def is_session_id(value: object) -> bool:
    return isinstance(value, str) and bool(_SESSION_ID.match(value))


def is_message_id(value: object) -> bool:
    return isinstance(value, str) and bool(_MESSAGE_ID.match(value))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
