"""Users and their tokens (users.sqlite3). Not derived from git: reindex keeps it.

Tokens are long random strings, so a plain SHA-256 of the token is a safe thing to store."""

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
"""
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
