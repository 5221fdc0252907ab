"""The SQLite index: a cache derived from the session repositories (DESIGN §1.1).

One connection, so one writer (aiosqlite runs it on its own thread), and one task at a time
on it (`Index.use`): aiosqlite runs each call alone, but a statement stepped by one call and
read by the next (a query's rows, a claim's `UPDATE … RETURNING`) stays in progress between
them, and a commit or an `executemany` of another task in between fails ("cannot commit
transaction - SQL statements in progress", "bad parameter or other API misuse": a flood of
sub-agents lost runs' index and search rows so, issue 34). Deleting the file and running
`braid reindex` rebuilds it from git alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol, cast

import aiosqlite

from server.base.records import RunRecord, RunRow, SessionMeta, SessionRow

# One schema for both backends; only the type of a flag differs between the dialects.
SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    forked_from_session_id TEXT,
    root_session_id TEXT,
    archived {flag},
    model TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id, updated_at);
CREATE TABLE IF NOT EXISTS runs (
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    status TEXT NOT NULL,
    branch TEXT,
    forked_from_run_id TEXT,
    forked_from_message_index INTEGER,
    regenerated_from TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT,
    PRIMARY KEY (session_id, run_id)
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(session_id, created_at);
CREATE INDEX IF NOT EXISTS runs_by_fork ON runs(session_id, forked_from_run_id);
"""
SCHEMA = SCHEMA_TEMPLATE.format(flag="INTEGER NOT NULL DEFAULT 0")

SESSION_COLUMNS = (
    "session_id", "user_id", "title", "created_at", "updated_at",
    "forked_from_session_id", "root_session_id", "archived", "model",
)
# Columns added after the first release: an older index file gets them on open.
ADDED_SESSION_COLUMNS = {"archived": "INTEGER NOT NULL DEFAULT 0", "model": "TEXT"}
RUN_COLUMNS = (
    "session_id", "run_id", "status", "branch", "forked_from_run_id",
    "forked_from_message_index", "regenerated_from", "created_at", "updated_at",
)

# Forked runs and the runs they fork from (a fork of a fork names its parent, which is
# then a forked run too, so the set is closed under `lineage._origin`). Two halves, each
# read through `runs_by_fork`, so the cost follows the forks, not the session's runs.
LINEAGE_SQL = (
    "SELECT * FROM runs WHERE session_id = ? AND forked_from_run_id IS NOT NULL UNION "
    "SELECT r.* FROM runs r JOIN (SELECT DISTINCT forked_from_run_id AS id FROM runs "
    "WHERE session_id = ? AND forked_from_run_id IS NOT NULL) f ON r.run_id = f.id "
    "WHERE r.session_id = ? ORDER BY created_at, run_id"
)


class Index:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: aiosqlite.Connection | None = None
        self._turn = asyncio.Lock()

    async def open(self) -> bool:
        """Open (and create) the file; True when it did not exist yet (reindex it)."""
        fresh = not self.path.exists()
        self._db = await aiosqlite.connect(self.path)
        self._db.row_factory = aiosqlite.Row
        await self._db.execute("PRAGMA journal_mode=WAL")
        # A run's row is what the page lists and what recovery reads: once a commit returns
        # it survives a power cut (WAL's NORMAL could lose the last ones: DESIGN "Durability").
        await self._db.execute("PRAGMA synchronous=FULL")
        await self._db.executescript(SCHEMA)
        async with self._db.execute("PRAGMA table_info(sessions)") as cur:
            have = {r[1] for r in await cur.fetchall()}
        for name, decl in ADDED_SESSION_COLUMNS.items():
            if name not in have:
                await self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {decl}")
        await self._db.commit()
        return fresh

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None

    @property
    def db(self) -> aiosqlite.Connection:
        assert self._db is not None, "index not open"
        return self._db

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection, to this task alone until the block ends: every statement it
        stepped is read to its end (or closed) and every write committed before another
        task's go (see the module's docstring). Not re-entrant."""
        async with self._turn:
            yield self.db

    async def upsert_session(self, meta: SessionMeta, updated_at: str | None = None) -> None:
        row: dict[str, object] = {c: meta.get(c) for c in SESSION_COLUMNS}
        row["title"] = row["title"] or ""
        row["archived"] = 1 if row["archived"] else 0
        row["updated_at"] = updated_at or meta.get("updated_at") or meta["created_at"]
        async with self.use() as db:
            await _upsert(db, "sessions", SESSION_COLUMNS, row)
            await db.commit()

    async def upsert_run(self, session_id: str, run: RunRecord | RunRow) -> None:
        row: dict[str, object] = {c: run.get(c) for c in RUN_COLUMNS}
        row["session_id"] = session_id
        # The row and the session's time in one transaction: one sync (FULL), not two.
        async with self.use() as db:
            await _upsert(db, "runs", RUN_COLUMNS, row)
            await db.execute(
                "UPDATE sessions SET updated_at = max(updated_at, ?) WHERE session_id = ?",
                (run.get("updated_at") or run.get("created_at"), session_id),
            )
            await db.commit()

    async def rows(self, sql: str, args: Any = (), commit: bool = False
                   ) -> list[dict[str, Any]]:
        """The rows of one statement, read to their end in this task's turn (and what it
        wrote committed, with `commit`: an `UPDATE … RETURNING`)."""
        async with self.use() as db:
            async with db.execute(sql, args) as cur:
                rows = [dict(r) for r in await cur.fetchall()]
            if commit:
                await db.commit()
        return rows

    async def change(self, *statements: tuple[str, Any]) -> int:
        """Statements run and committed together in this task's turn; the last one's
        count of rows changed."""
        count = 0
        async with self.use() as db:
            for sql, args in statements:
                cur = await db.execute(sql, args)
                count = int(cur.rowcount)
                await cur.close()
            await db.commit()
        return count

    async def list_sessions(self, user_id: str, query: str = "",
                            archived: bool = False) -> list[SessionRow]:
        """The user's sessions, archived ones only when `archived`, else the others."""
        sql = "SELECT * FROM sessions WHERE user_id = ? AND archived = ?"
        args: list[Any] = [user_id, 1 if archived else 0]
        if query:
            sql += " AND title LIKE ? ESCAPE '\\'"
            escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args.append(f"%{escaped}%")
        sql += " ORDER BY created_at DESC"
        rows = cast(list[SessionRow], await self.rows(sql, args))
        for row in rows:
            row["archived"] = bool(row["archived"])  # 0 or 1 in SQLite
        return rows

    async def delete_session(self, session_id: str) -> None:
        await self.change(("DELETE FROM runs WHERE session_id = ?", (session_id,)),
                          ("DELETE FROM sessions WHERE session_id = ?", (session_id,)))

    async def delete_run(self, session_id: str, run_id: str) -> None:
        await self.change(("DELETE FROM runs WHERE session_id = ? AND run_id = ?",
                           (session_id, run_id)))

    async def list_runs(self, session_id: str) -> list[RunRow]:
        return cast(list[RunRow], await self.rows(
            "SELECT * FROM runs WHERE session_id = ? ORDER BY created_at", (session_id,)))

    async def lineage_runs(self, session_id: str) -> list[RunRow]:
        """The runs that have siblings or may have (forked runs and the runs they fork
        from), by `created_at`: what `lineage.sibling_map` needs, costing the forks, not
        the session's runs."""
        return cast(list[RunRow], await self.rows(LINEAGE_SQL, (session_id,) * 3))

    async def runs_since(self, session_id: str, created_at: str) -> list[RunRow]:
        """The runs created at or after `created_at`, oldest first."""
        return cast(list[RunRow], await self.rows(
            "SELECT * FROM runs WHERE session_id = ? AND created_at >= ? "
            "ORDER BY created_at, run_id", (session_id, created_at)))

    async def count_runs(self, session_id: str) -> int:
        rows = await self.rows("SELECT count(*) AS n FROM runs WHERE session_id = ?",
                               (session_id,))
        return int(rows[0]["n"]) if rows else 0

    async def runs_with_status(self, status: str) -> list[RunRow]:
        return cast(list[RunRow], await self.rows("SELECT * FROM runs WHERE status = ?",
                                                  (status,)))

    async def copy_runs(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's runs: one statement, however many."""
        cols = ", ".join(RUN_COLUMNS[1:])
        await self.change((f"INSERT OR REPLACE INTO runs (session_id, {cols}) "
                           f"SELECT ?, {cols} FROM runs WHERE session_id = ?",
                           (to_session_id, from_session_id)))

    async def clear(self) -> None:
        await self.change(("DELETE FROM runs", ()), ("DELETE FROM sessions", ()))


async def _upsert(db: aiosqlite.Connection, table: str, columns: tuple[str, ...],
                  row: dict[str, object]) -> None:
    cols = ", ".join(columns)
    marks = ", ".join("?" for _ in columns)
    await db.execute(f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})",
                     tuple(row[c] for c in columns))


class SessionIndex(Protocol):
    """What the layers above ask of the index: this SQLite one, or
    `backends.pg_index.PgIndex` on a team server (the same methods)."""

    async def open(self) -> bool: ...
    async def close(self) -> None: ...
    async def upsert_session(self, meta: SessionMeta,
                             updated_at: str | None = None) -> None: ...
    async def upsert_run(self, session_id: str, run: RunRecord | RunRow) -> None: ...
    async def list_sessions(self, user_id: str, query: str = "",
                            archived: bool = False) -> list[SessionRow]: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def delete_run(self, session_id: str, run_id: str) -> None: ...
    async def list_runs(self, session_id: str) -> list[RunRow]: ...
    async def lineage_runs(self, session_id: str) -> list[RunRow]: ...
    async def runs_since(self, session_id: str, created_at: str) -> list[RunRow]: ...
    async def count_runs(self, session_id: str) -> int: ...
    async def runs_with_status(self, status: str) -> list[RunRow]: ...
    async def copy_runs(self, from_session_id: str, to_session_id: str) -> None: ...
    async def clear(self) -> None: ...
