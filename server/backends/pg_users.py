"""Users and token hashes in PostgreSQL (BRAID_DATABASE_URL), shared by every process.

`users.Users` is called synchronously (auth, the CLI), so this keeps the same synchronous
methods on a connection of its own thread (`pg_conn.PgThread`): each call waits for its one
short query, as a SQLite call waits for its file."""

from __future__ import annotations

import hmac
from typing import Any

from server.backends.pg_conn import PgThread
from server.base.errors import BadRequest
from server.base.ids import now_iso
from server.base.records import ConnectionRecord
from server.store.users import (
    USER_NAME,
    connection_record,
    connection_row,
    hash_token,
    new_token,
    roots_list,
    roots_text,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    user_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    roots TEXT
);
ALTER TABLE users ADD COLUMN IF NOT EXISTS roots TEXT;
CREATE TABLE IF NOT EXISTS connections (
    user_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    secret TEXT NOT NULL,
    models TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, kind, name)
);
"""
SCHEMA_LOCK = 0x6272616965


class PgUsers:
    def __init__(self, url: str) -> None:
        self._db = PgThread(url, "braid-pg-users")

        async def create(db: Any) -> None:
            async with db.transaction():  # two processes starting at once
                await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
                await db.execute(SCHEMA)

        self._db.run(create)

    def set_token(self, user_id: str, token: str | None = None) -> str:
        """Create `user_id` or replace its token; returns the token in clear (shown once)."""
        if not USER_NAME.match(user_id):
            raise BadRequest("a user name is 1-64 letters, digits, '_', '.' or '-'")
        token = token or new_token()
        hashed, at = hash_token(token), now_iso()
        self._db.run(lambda db: db.execute(
            "INSERT INTO users (user_id, token_hash, created_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (user_id) DO UPDATE SET token_hash = EXCLUDED.token_hash",
            user_id, hashed, at))
        return token

    def authenticate(self, token: str | None) -> str | None:
        if not token or len(token) > 512:
            return None
        wanted = hash_token(token)
        row = self._db.run(lambda db: db.fetchrow(
            "SELECT user_id, token_hash FROM users WHERE token_hash = $1", wanted))
        if row and hmac.compare_digest(row["token_hash"], wanted):
            return str(row["user_id"])
        return None

    def exists(self, user_id: str) -> bool:
        row = self._db.run(lambda db: db.fetchrow(
            "SELECT 1 FROM users WHERE user_id = $1", user_id))
        return row is not None

    def set_roots(self, user_id: str, roots: list[str]) -> None:
        text = roots_text(roots)
        self._db.run(lambda db: db.execute(
            "UPDATE users SET roots = $1 WHERE user_id = $2", text, user_id))

    def roots(self, user_id: str) -> list[str]:
        row = self._db.run(lambda db: db.fetchrow(
            "SELECT roots FROM users WHERE user_id = $1", user_id))
        return roots_list(row["roots"] if row else None)

    def connections(self, user_id: str) -> list[ConnectionRecord]:
        rows = self._db.run(lambda db: db.fetch(
            "SELECT kind, name, url, secret, models, created_at FROM connections "
            "WHERE user_id = $1 ORDER BY kind DESC, name", user_id))
        return [connection_record(r["kind"], r["name"], r["url"], r["secret"], r["models"],
                                  r["created_at"]) for r in rows]

    def put_connection(self, user_id: str, record: ConnectionRecord) -> None:
        """Add `record`, or replace the user's connection of its kind and name."""
        row = connection_row(record)
        self._db.run(lambda db: db.execute(
            "INSERT INTO connections (user_id, kind, name, url, secret, models, created_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (user_id, kind, name) DO UPDATE "
            "SET url = EXCLUDED.url, secret = EXCLUDED.secret, models = EXCLUDED.models, "
            "created_at = EXCLUDED.created_at", user_id, *row))

    def remove_connection(self, user_id: str, kind: str, name: str) -> bool:
        status = self._db.run(lambda db: db.execute(
            "DELETE FROM connections WHERE user_id = $1 AND kind = $2 AND name = $3",
            user_id, kind, name))
        return str(status).rsplit(" ", 1)[-1] != "0"

    def close(self) -> None:
        self._db.close()
