"""Users and their tokens (users.sqlite3), and each user's own connections (model endpoints
and HTTP MCP servers added on the page). Not derived from git: reindex keeps it.

Tokens are long random strings, so a plain SHA-256 of the token is a safe thing to store. A
connection's key or headers must be sent as they are, so they are kept in clear: the file
is the server user's alone (mode 0600), and nothing of it goes into a session's repository."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar
from weakref import WeakKeyDictionary

from server.base.errors import BadRequest
from server.base.ids import now_iso
from server.base.records import ConnectionRecord

T = TypeVar("T")
DEFAULT_USER = "local"
USER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    user_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    roots TEXT
);
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
# A connection's `secret` and `models` are JSON (connection_record reads them back).
# `roots`: a JSON list of the folders the user may import from and export to (roots.py);
# NULL for none. Databases made before it get the column when opened.
ADD_ROOTS = "ALTER TABLE users ADD COLUMN roots TEXT"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Users:
    """Small and rarely written, so plain sqlite3 calls (each a few microseconds) suffice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Made the server user's alone before SQLite opens it (its journal takes the same
        # mode): it holds the keys of the users' connections.
        os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600))
        os.chmod(path, 0o600)
        with self._connect() as db:
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(users)")}
            if "roots" not in columns:
                with contextlib.suppress(sqlite3.OperationalError):  # another process did
                    db.execute(ADD_ROOTS)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one transaction, closed after it: `with sqlite3.connect()` only
        commits, and the connection (in a reference cycle) kept its sqlite heap until the
        cyclic GC came by, one per request authenticated (issue 11)."""
        db = sqlite3.connect(self.path, timeout=10)
        try:
            with db:
                yield db
        finally:
            db.close()

    def set_token(self, user_id: str, token: str | None = None) -> str:
        """Create `user_id` or replace its token; returns the token in clear (shown once)."""
        if not USER_NAME.match(user_id):
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

    def set_roots(self, user_id: str, roots: list[str]) -> None:
        with self._connect() as db:
            db.execute("UPDATE users SET roots = ? WHERE user_id = ?",
                       (roots_text(roots), user_id))

    def roots(self, user_id: str) -> list[str]:
        with self._connect() as db:
            row = db.execute("SELECT roots FROM users WHERE user_id = ?", (user_id,)).fetchone()
        return roots_list(row[0] if row else None)

    def connections(self, user_id: str) -> list[ConnectionRecord]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT kind, name, url, secret, models, created_at FROM connections "
                "WHERE user_id = ? ORDER BY kind DESC, name", (user_id,)).fetchall()
        return [connection_record(*row) for row in rows]

    def put_connection(self, user_id: str, record: ConnectionRecord) -> None:
        """Add `record`, or replace the user's connection of its kind and name."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO connections (user_id, kind, name, url, secret, models, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", (user_id, *connection_row(record)))

    def remove_connection(self, user_id: str, kind: str, name: str) -> bool:
        with self._connect() as db:
            gone = db.execute("DELETE FROM connections WHERE user_id = ? AND kind = ? AND "
                              "name = ?", (user_id, kind, name)).rowcount
        return gone > 0


def connection_row(record: ConnectionRecord) -> tuple[str, str, str, str, str, str]:
    """(kind, name, url, secret, models, created_at) as both backends store them."""
    return (record["kind"], record["name"], record["url"], json.dumps(record["secret"]),
            json.dumps(record["models"]), record["created_at"])


def connection_record(kind: str, name: str, url: str, secret: str, models: str,
                      created_at: str) -> ConnectionRecord:
    """A stored row as the record it was (a value not of its shape reads as empty)."""
    try:
        keys, ids = json.loads(secret), json.loads(models)
    except ValueError:
        keys, ids = {}, []
    return {"kind": kind, "name": name, "url": url,
            "secret": {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict)
            else {},
            "models": [str(m) for m in ids] if isinstance(ids, list) else [],
            "created_at": created_at}


def check_roots(raw: str) -> list[str]:
    """`--roots A:B` as absolute folder paths (`~` expanded); "" for none."""
    out = []
    for part in raw.split(os.pathsep):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser()
        if not path.is_absolute():
            raise BadRequest(f"a root must be an absolute path, not {part!r}")
        out.append(str(path))
    return out


def roots_text(roots: list[str]) -> str | None:
    return json.dumps(roots) if roots else None


def roots_list(text: str | None) -> list[str]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(p) for p in value] if isinstance(value, list) else []


class UserStore(Protocol):
    """What a users backend offers (SQLite here; another may keep them elsewhere): plain
    blocking calls, each one short query."""

    def set_token(self, user_id: str, token: str | None = None) -> str: ...
    def authenticate(self, token: str | None) -> str | None: ...
    def exists(self, user_id: str) -> bool: ...
    def set_roots(self, user_id: str, roots: list[str]) -> None: ...
    def roots(self, user_id: str) -> list[str]: ...
    def connections(self, user_id: str) -> list[ConnectionRecord]: ...
    def put_connection(self, user_id: str, record: ConnectionRecord) -> None: ...
    def remove_connection(self, user_id: str, kind: str, name: str) -> bool: ...
    def close(self) -> None: ...


class UsersOffLoop:
    """The users backend as the server's event loop calls it: each call runs on one thread
    of its own, so a slow disk (or a database) never stalls every socket and page. The CLI,
    which has no loop, calls the backend directly."""

    def __init__(self, backend: UserStore) -> None:
        self.backend = backend
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="braid-users")

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def authenticate(self, token: str | None) -> str | None:
        if not token or len(token) > 512:  # nothing to look up
            return None
        return await self._run(lambda: self.backend.authenticate(token))

    async def set_token(self, user_id: str, token: str | None = None) -> str:
        return await self._run(lambda: self.backend.set_token(user_id, token))

    async def exists(self, user_id: str) -> bool:
        return await self._run(lambda: self.backend.exists(user_id))

    async def roots(self, user_id: str) -> list[str]:
        return await self._run(lambda: self.backend.roots(user_id))

    async def connections(self, user_id: str) -> list[ConnectionRecord]:
        return await self._run(lambda: self.backend.connections(user_id))

    async def put_connection(self, user_id: str, record: ConnectionRecord) -> None:
        await self._run(lambda: self.backend.put_connection(user_id, record))

    async def remove_connection(self, user_id: str, kind: str, name: str) -> bool:
        return await self._run(lambda: self.backend.remove_connection(user_id, kind, name))

    def close(self) -> None:
        self._thread.shutdown(wait=False)


_OFF_LOOP: WeakKeyDictionary[UserStore, UsersOffLoop] = WeakKeyDictionary()


def off_loop(users: UserStore) -> UsersOffLoop:
    """The event loop's way to the users backend `users`: one `UsersOffLoop` per backend,
    made on first use (its thread ends when the backend goes)."""
    wrapper = _OFF_LOOP.get(users)
    if wrapper is None:
        wrapper = _OFF_LOOP[users] = UsersOffLoop(users)
    return wrapper
