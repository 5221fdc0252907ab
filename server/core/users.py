"""Users and their tokens (users.sqlite3). Not derived from git: reindex keeps it.

Tokens are long random strings, so a plain SHA-256 of the token is a safe thing to store."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from pathlib import Path

from .errors import BadRequest
from .ids import now_iso

DEFAULT_USER = "local"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    user_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);
"""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Users:
    """Small and rarely written, so plain sqlite3 calls (each a few microseconds) suffice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def set_token(self, user_id: str, token: str | None = None) -> str:
        """Create `user_id` or replace its token; returns the token in clear (shown once)."""
        if not _NAME.match(user_id):
            raise BadRequest("a user name is 1-64 letters, digits, '_', '.' or '-'")
        token = token or new_token()
        with self._connect() as db:
            db.execute(
                "INSERT INTO users (user_id, token_hash, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT(user_id) DO UPDATE SET token_hash = excluded.token_hash",
                (user_id, hash_token(token), now_iso()),
            )
        return token

    def authenticate(self, token: str | None) -> str | None:
        if not token or len(token) > 512:
            return None
        wanted = hash_token(token)
        with self._connect() as db:
            row = db.execute(
                "SELECT user_id, token_hash FROM users WHERE token_hash = ?", (wanted,)
            ).fetchone()
        if row and hmac.compare_digest(row[1], wanted):
            return str(row[0])
        return None

    def close(self) -> None:
        """Nothing stays open: each call opens the file (PostgreSQL's keeps a connection)."""

    def exists(self, user_id: str) -> bool:
        with self._connect() as db:
            row = db.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone()
        return row is not None
