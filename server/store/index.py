"""The SQLite index: a cache derived from the session repositories (DESIGN §1.1).

One connection, so one writer (aiosqlite runs it on its own thread). Deleting the file and
running `braid reindex` rebuilds it from git alone."""

from __future__ import annotations

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

    async def upsert_session(self, meta: SessionMeta, updated_at: str | None = None) -> None:
        row: dict[str, object] = {c: meta.get(c) for c in SESSION_COLUMNS}
        row["title"] = row["title"] or ""
        row["archived"] = 1 if row["archived"] else 0
        row["updated_at"] = updated_at or meta.get("updated_at") or meta["created_at"]
        await self._upsert("sessions", SESSION_COLUMNS, row)
        await self.db.commit()

    async def upsert_run(self, session_id: str, run: RunRecord | RunRow) -> None:
        row: dict[str, object] = {c: run.get(c) for c in RUN_COLUMNS}
        row["session_id"] = session_id
        # The row and the session's time in one transaction: one sync (FULL), not two.
        await self._upsert("runs", RUN_COLUMNS, row)
        await self.db.execute(
            "UPDATE sessions SET updated_at = max(updated_at, ?) WHERE session_id = ?",
            (run.get("updated_at") or run.get("created_at"), session_id),
        )
        await self.db.commit()

    async def _upsert(self, table: str, columns: tuple[str, ...], row: dict[str, object]) -> None:
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        await self.db.execute(
            f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})",
            tuple(row[c] for c in columns),
        )

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
        async with self.db.execute(sql, args) as cur:
            rows = cast(list[SessionRow], [dict(r) for r in await cur.fetchall()])
        for row in rows:
            row["archived"] = bool(row["archived"])  # 0 or 1 in SQLite
        return rows

    async def delete_session(self, session_id: str) -> None:
        await self.db.execute("DELETE FROM runs WHERE session_id = ?", (session_id,))
        await self.db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        await self.db.commit()

    async def delete_run(self, session_id: str, run_id: str) -> None:
        await self.db.execute("DELETE FROM runs WHERE session_id = ? AND run_id = ?",
                              (session_id, run_id))
        await self.db.commit()

    async def list_runs(self, session_id: str) -> list[RunRow]:
        async with self.db.execute(
            "SELECT * FROM runs WHERE session_id = ? ORDER BY created_at", (session_id,)
        ) as cur:
            return cast(list[RunRow], [dict(r) for r in await cur.fetchall()])

    async def lineage_runs(self, session_id: str) -> list[RunRow]:
        """The runs that have siblings or may have (forked runs and the runs they fork
        from), by `created_at`: what `lineage.sibling_map` needs, costing the forks, not
        the session's runs."""
        async with self.db.execute(LINEAGE_SQL, (session_id,) * 3) as cur:
            return cast(list[RunRow], [dict(r) for r in await cur.fetchall()])

    async def runs_since(self, session_id: str, created_at: str) -> list[RunRow]:
        """The runs created at or after `created_at`, oldest first."""
        async with self.db.execute(
            "SELECT * FROM runs WHERE session_id = ? AND created_at >= ? "
            "ORDER BY created_at, run_id", (session_id, created_at)
        ) as cur:
            return cast(list[RunRow], [dict(r) for r in await cur.fetchall()])

    async def count_runs(self, session_id: str) -> int:
        async with self.db.execute(
            "SELECT count(*) FROM runs WHERE session_id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def runs_with_status(self, status: str) -> list[RunRow]:
        async with self.db.execute("SELECT * FROM runs WHERE status = ?", (status,)) as cur:
            return cast(list[RunRow], [dict(r) for r in await cur.fetchall()])

    async def copy_runs(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's runs: one statement, however many."""
        cols = ", ".join(RUN_COLUMNS[1:])
        await self.db.execute(
            f"INSERT OR REPLACE INTO runs (session_id, {cols}) "
            f"SELECT ?, {cols} FROM runs WHERE session_id = ?",
            (to_session_id, from_session_id),
        )
        await self.db.commit()

    async def clear(self) -> None:
        await self.db.execute("DELETE FROM runs")
        await self.db.execute("DELETE FROM sessions")
        await self.db.commit()


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
