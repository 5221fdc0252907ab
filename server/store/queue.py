"""The message queue (DESIGN §4 "Queue"): messages sent while their branch was busy, kept in
the index database so they survive a restart. `SqliteQueue` shares `index.Index`'s
connection and file; `backends.pg_queue.PgQueue` is the same table in PostgreSQL for a team
server. Features name them through the `MessageQueue` Protocol.

A row lives from `add` until the turn it starts is open and indexed (`done`). Starting one
is two steps, so a kill between them loses nothing: `claim` marks the oldest waiting row of
a (session, branch) as being started by a process (one statement: two claimants never get
the same row), and `done` deletes it once the run exists. A claim whose process died is
settled by `features.queue.settle_stale`: the run exists (its id is the queued id) → `done`,
else `unclaim` (it waits again, in its place)."""

from __future__ import annotations

from typing import Protocol, cast

from server.base.ids import new_queued_id, now_iso
from server.base.records import QueueRow
from server.store.index import Index

# One schema for both backends; only the type of the ordering key differs.
QUEUE_SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS queued_messages (
    seq {serial},
    queued_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    claimed_by TEXT
);
CREATE INDEX IF NOT EXISTS queued_by_branch ON queued_messages(session_id, branch, seq);
"""
QUEUE_COLUMNS = "queued_id, session_id, branch, text, created_at, claimed_by"
# The oldest message of a (session, branch) that nobody is starting, marked as started by
# a process: one statement, so two processes (or two tasks) never claim the same row.
CLAIM_SQL = (
    "UPDATE queued_messages SET claimed_by = {owner} WHERE seq = (SELECT seq FROM "
    "queued_messages WHERE session_id = {sid} AND branch = {branch} AND claimed_by IS NULL "
    "ORDER BY seq LIMIT 1{lock}) AND claimed_by IS NULL RETURNING " + QUEUE_COLUMNS
)

# A user's queued messages and their bytes (the fair share, DESIGN §4): through the index's
# sessions table, which names each session's user.
USER_LOAD_SQL = (
    "SELECT COUNT(*), COALESCE(SUM({bytes}), 0) FROM queued_messages q "
    "JOIN sessions s ON s.session_id = q.session_id WHERE s.user_id = {arg}"
)


class MessageQueue(Protocol):
    """What features ask of the queue: `SqliteQueue`, or `backends.pg_queue.PgQueue`."""

    owner: str  # this process (its claims are marked with it)

    async def open(self) -> None: ...
    async def add(self, session_id: str, branch: str, text: str) -> QueueRow: ...
    async def waiting(self, session_id: str) -> list[QueueRow]: ...
    async def has_waiting(self, session_id: str, branch: str) -> bool: ...
    async def update(self, session_id: str, queued_id: str, text: str) -> bool: ...
    async def remove(self, session_id: str, queued_id: str) -> bool: ...
    async def claim(self, session_id: str, branch: str) -> QueueRow | None: ...
    async def unclaim(self, queued_id: str) -> None: ...
    async def done(self, queued_id: str) -> None: ...
    async def branches_waiting(self) -> list[tuple[str, str]]: ...
    async def stale_claims(self) -> list[QueueRow]: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def user_load(self, user_id: str) -> tuple[int, int]: ...


class SqliteQueue:
    """The queue in the SQLite index file, on the index's one connection."""

    def __init__(self, index: Index, owner: str) -> None:
        self.index = index
        self.owner = owner  # this process: what its claims are marked with

    async def open(self) -> None:
        """Create the table (the index is open already)."""
        async with self.index.use() as db:
            await db.executescript(
                QUEUE_SCHEMA_TEMPLATE.format(serial="INTEGER PRIMARY KEY AUTOINCREMENT"))
            await db.commit()

    async def _rows(self, sql: str, args: tuple[object, ...]) -> list[QueueRow]:
        return cast(list[QueueRow], await self.index.rows(sql, args))

    async def _change(self, sql: str, args: tuple[object, ...]) -> int:
        return await self.index.change((sql, args))

    async def add(self, session_id: str, branch: str, text: str) -> QueueRow:
        row: QueueRow = {"queued_id": new_queued_id(), "session_id": session_id,
                         "branch": branch, "text": text, "created_at": now_iso(),
                         "claimed_by": None}
        await self._change(
            "INSERT INTO queued_messages (queued_id, session_id, branch, text, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (row["queued_id"], session_id, branch, text, row["created_at"]))
        return row

    async def waiting(self, session_id: str) -> list[QueueRow]:
        return await self._rows(
            f"SELECT {QUEUE_COLUMNS} FROM queued_messages WHERE session_id = ? "
            "AND claimed_by IS NULL ORDER BY seq", (session_id,))

    async def has_waiting(self, session_id: str, branch: str) -> bool:
        return bool(await self._rows(
            f"SELECT {QUEUE_COLUMNS} FROM queued_messages WHERE session_id = ? AND "
            "branch = ? LIMIT 1", (session_id, branch)))

    async def update(self, session_id: str, queued_id: str, text: str) -> bool:
        return await self._change(
            "UPDATE queued_messages SET text = ? WHERE session_id = ? AND queued_id = ? "
            "AND claimed_by IS NULL", (text, session_id, queued_id)) > 0

    async def remove(self, session_id: str, queued_id: str) -> bool:
        return await self._change(
            "DELETE FROM queued_messages WHERE session_id = ? AND queued_id = ? "
            "AND claimed_by IS NULL", (session_id, queued_id)) > 0

    async def claim(self, session_id: str, branch: str) -> QueueRow | None:
        sql = CLAIM_SQL.format(owner="?", sid="?", branch="?", lock="")
        # Its rows read and its write committed in one turn on the connection: between
        # the two the statement is in progress, and another task's commit then failed.
        rows = await self.index.rows(sql, (self.owner, session_id, branch), commit=True)
        return cast(QueueRow, rows[0]) if rows else None

    async def unclaim(self, queued_id: str) -> None:
        await self._change("UPDATE queued_messages SET claimed_by = NULL WHERE queued_id = ?",
                           (queued_id,))

    async def done(self, queued_id: str) -> None:
        await self._change("DELETE FROM queued_messages WHERE queued_id = ?", (queued_id,))

    async def branches_waiting(self) -> list[tuple[str, str]]:
        rows = await self.index.rows("SELECT DISTINCT session_id, branch FROM queued_messages "
                                     "WHERE claimed_by IS NULL")
        return [(str(r["session_id"]), str(r["branch"])) for r in rows]

    async def stale_claims(self) -> list[QueueRow]:
        """Claims of another process: one process uses the file, so a dead one's."""
        return await self._rows(
            f"SELECT {QUEUE_COLUMNS} FROM queued_messages WHERE claimed_by IS NOT NULL "
            "AND claimed_by <> ? ORDER BY seq", (self.owner,))

    async def delete_session(self, session_id: str) -> None:
        await self._change("DELETE FROM queued_messages WHERE session_id = ?", (session_id,))

    async def user_load(self, user_id: str) -> tuple[int, int]:
        """(messages, bytes of their text) queued in the user's sessions: their share."""
        sql = USER_LOAD_SQL.format(arg="?", bytes="LENGTH(CAST(q.text AS BLOB))")
        rows = await self.index.rows(sql, (user_id,))
        if not rows:
            return (0, 0)
        count, size = rows[0].values()
        return (int(count), int(size))
