"""The index in PostgreSQL (BRAID_DATABASE_URL=postgresql://...): the same cache of sessions
and runs as `index.Index`, with the same methods, shared by every process of a team server.

Still derived from git: `braid reindex` rebuilds it from the session repositories alone."""

from __future__ import annotations

from typing import Any, cast

from server.base.records import RunRecord, RunRow, SessionMeta, SessionRow
from server.store.index import LINEAGE_SQL, RUN_COLUMNS, SCHEMA_TEMPLATE, SESSION_COLUMNS

SCHEMA = SCHEMA_TEMPLATE.format(flag="BOOLEAN NOT NULL DEFAULT FALSE")
# Two processes creating the schema at once would race on CREATE ... IF NOT EXISTS.
SCHEMA_LOCK = 0x6272616964  # "braid"


def _upsert_sql(table: str, columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    cols = ", ".join(columns)
    marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)
    return (f"INSERT INTO {table} ({cols}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}")


UPSERT_SESSION = _upsert_sql("sessions", SESSION_COLUMNS, ("session_id",))
UPSERT_RUN = _upsert_sql("runs", RUN_COLUMNS, ("session_id", "run_id"))


async def connect_pool(url: str, size: int = 8) -> Any:
    import asyncpg  # only a team server needs it

    return await asyncpg.create_pool(url, min_size=1, max_size=size)


class PgIndex:
    """Each call takes a connection from the pool: many writers, one per process or more."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = None  # no file: `Braid.start` asks `open()` whether the index is new
        self._pool: Any = None

    async def open(self) -> bool:
        """Create the schema if needed; True when the tables did not exist yet."""
        self._pool = await connect_pool(self.url)
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            fresh = await db.fetchval("SELECT to_regclass('sessions') IS NULL")
            await db.execute(SCHEMA)
        return bool(fresh)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> Any:
        assert self._pool is not None, "index not open"
        return self._pool

    async def upsert_session(self, meta: SessionMeta, updated_at: str | None = None) -> None:
        row: dict[str, object] = {c: meta.get(c) for c in SESSION_COLUMNS}
        row["title"] = row["title"] or ""
        row["archived"] = bool(row["archived"])
        row["updated_at"] = updated_at or meta.get("updated_at") or meta["created_at"]
        await self.pool.execute(UPSERT_SESSION, *(row[c] for c in SESSION_COLUMNS))

    async def upsert_run(self, session_id: str, run: RunRecord | RunRow) -> None:
        row: dict[str, object] = {c: run.get(c) for c in RUN_COLUMNS}
        row["session_id"] = session_id
        index = run.get("forked_from_message_index")  # an int, or a str in an old record
        row["forked_from_message_index"] = int(index) if index is not None else None
        async with self.pool.acquire() as db, db.transaction():
            await db.execute(UPSERT_RUN, *(row[c] for c in RUN_COLUMNS))
            await db.execute(
                "UPDATE sessions SET updated_at = GREATEST(updated_at, $1) "
                "WHERE session_id = $2",
                run.get("updated_at") or run.get("created_at"), session_id)

    async def list_sessions(self, user_id: str, query: str = "",
                            archived: bool = False) -> list[SessionRow]:
        """The user's sessions, archived ones only when `archived`, else the others."""
        sql = "SELECT * FROM sessions WHERE user_id = $1 AND archived = $2"
        args: list[Any] = [user_id, archived]
        if query:
            sql += " AND title LIKE $3 ESCAPE '\\'"
            escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args.append(f"%{escaped}%")
        sql += " ORDER BY created_at DESC"
        return cast(list[SessionRow], [dict(r) for r in await self.pool.fetch(sql, *args)])

    async def delete_session(self, session_id: str) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("DELETE FROM runs WHERE session_id = $1", session_id)
            await db.execute("DELETE FROM sessions WHERE session_id = $1", session_id)

    async def delete_run(self, session_id: str, run_id: str) -> None:
        await self.pool.execute("DELETE FROM runs WHERE session_id = $1 AND run_id = $2",
                                session_id, run_id)

    async def list_runs(self, session_id: str) -> list[RunRow]:
        rows = await self.pool.fetch(
            "SELECT * FROM runs WHERE session_id = $1 ORDER BY created_at", session_id)
        return cast(list[RunRow], [dict(r) for r in rows])

    async def lineage_runs(self, session_id: str) -> list[RunRow]:
        """Forked runs and the runs they fork from (index.Index.lineage_runs)."""
        rows = await self.pool.fetch(LINEAGE_SQL.replace("?", "$1"), session_id)
        return cast(list[RunRow], [dict(r) for r in rows])

    async def runs_since(self, session_id: str, created_at: str) -> list[RunRow]:
        rows = await self.pool.fetch(
            "SELECT * FROM runs WHERE session_id = $1 AND created_at >= $2 "
            "ORDER BY created_at, run_id", session_id, created_at)
        return cast(list[RunRow], [dict(r) for r in rows])

    async def count_runs(self, session_id: str) -> int:
        return int(await self.pool.fetchval(
            "SELECT count(*) FROM runs WHERE session_id = $1", session_id))

    async def runs_with_status(self, status: str) -> list[RunRow]:
        return cast(list[RunRow], [dict(r) for r in await self.pool.fetch(
            "SELECT * FROM runs WHERE status = $1", status)])

    async def copy_runs(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's runs: one statement, however many."""
        cols = ", ".join(RUN_COLUMNS[1:])
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in RUN_COLUMNS[2:])
        await self.pool.execute(
            f"INSERT INTO runs (session_id, {cols}) "
            f"SELECT $1, {cols} FROM runs WHERE session_id = $2 "
            f"ON CONFLICT (session_id, run_id) DO UPDATE SET {sets}",
            to_session_id, from_session_id)

    async def clear(self) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("DELETE FROM runs")
            await db.execute("DELETE FROM sessions")
