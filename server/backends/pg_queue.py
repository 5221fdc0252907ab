"""The message queue in PostgreSQL (store/queue.py's `MessageQueue`), shared by every process
of a team server: a message queued through one process is started by whichever process
holds the branch free first (`features.queue.drain`). The claim is one UPDATE on the oldest
waiting row (`FOR UPDATE SKIP LOCKED`), so two processes never start the same message; a
claim whose process is gone (no fresh heartbeat in `braid_processes`, pg_team.py) is stale
and settled by the survivors."""

from __future__ import annotations

from typing import Any, cast

from server.backends.pg_index import PgIndex
from server.backends.pg_team import STALE
from server.base.ids import new_queued_id, now_iso
from server.base.records import QueueRow
from server.store.queue import CLAIM_SQL, QUEUE_COLUMNS, QUEUE_SCHEMA_TEMPLATE, USER_LOAD_SQL

SCHEMA_LOCK = 0x6272616971
CLAIM = CLAIM_SQL.format(owner="$1", sid="$2", branch="$3", lock=" FOR UPDATE SKIP LOCKED")


class PgQueue:
    def __init__(self, index: PgIndex, owner: str) -> None:
        self.index = index
        self.owner = owner  # the team's name of this process (pg_team.Team.owner_id)

    @property
    def pool(self) -> Any:
        return self.index.pool

    async def open(self) -> None:
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            await db.execute(QUEUE_SCHEMA_TEMPLATE.format(serial="BIGSERIAL PRIMARY KEY"))

    async def _rows(self, sql: str, *args: object) -> list[QueueRow]:
        return cast(list[QueueRow], [dict(r) for r in await self.pool.fetch(sql, *args)])

    async def add(self, session_id: str, branch: str, text: str) -> QueueRow:
        row: QueueRow = {"queued_id": new_queued_id(), "session_id": session_id,
                         "branch": branch, "text": text, "created_at": now_iso(),
                         "claimed_by": None}
        await self.pool.execute(
            "INSERT INTO queued_messages (queued_id, session_id, branch, text, created_at) "
            "VALUES ($1, $2, $3, $4, $5)",
            row["queued_id"], session_id, branch, text, row["created_at"])
        return row

    async def waiting(self, session_id: str) -> list[QueueRow]:
        return await self._rows(
            f"SELECT {QUEUE_COLUMNS} FROM queued_messages WHERE session_id = $1 "
            "AND claimed_by IS NULL ORDER BY seq", session_id)

    async def has_waiting(self, session_id: str, branch: str) -> bool:
        return bool(await self.pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM queued_messages WHERE session_id = $1 "
            "AND branch = $2)", session_id, branch))

    async def update(self, session_id: str, queued_id: str, text: str) -> bool:
        status = await self.pool.execute(
            "UPDATE queued_messages SET text = $1 WHERE session_id = $2 AND queued_id = $3 "
            "AND claimed_by IS NULL", text, session_id, queued_id)
        return bool(status.endswith(" 1"))

    async def remove(self, session_id: str, queued_id: str) -> bool:
        status = await self.pool.execute(
            "DELETE FROM queued_messages WHERE session_id = $1 AND queued_id = $2 "
            "AND claimed_by IS NULL", session_id, queued_id)
        return bool(status.endswith(" 1"))

    async def claim(self, session_id: str, branch: str) -> QueueRow | None:
        rows = await self._rows(CLAIM, self.owner, session_id, branch)
        return rows[0] if rows else None

    async def unclaim(self, queued_id: str) -> None:
        await self.pool.execute(
            "UPDATE queued_messages SET claimed_by = NULL WHERE queued_id = $1", queued_id)

    async def done(self, queued_id: str) -> None:
        await self.pool.execute("DELETE FROM queued_messages WHERE queued_id = $1", queued_id)

    async def branches_waiting(self) -> list[tuple[str, str]]:
        rows = await self.pool.fetch(
            "SELECT DISTINCT session_id, branch FROM queued_messages WHERE claimed_by IS NULL")
        return [(str(r["session_id"]), str(r["branch"])) for r in rows]

    async def stale_claims(self) -> list[QueueRow]:
        """Claims of processes with no fresh heartbeat (gone, or going)."""
        return await self._rows(
            f"SELECT {QUEUE_COLUMNS} FROM queued_messages q WHERE claimed_by IS NOT NULL "
            "AND claimed_by <> $1 AND NOT EXISTS (SELECT 1 FROM braid_processes p WHERE "
            f"p.owner_id = q.claimed_by AND p.seen_at > now() - interval '{STALE} seconds') "
            "ORDER BY seq", self.owner)

    async def delete_session(self, session_id: str) -> None:
        await self.pool.execute("DELETE FROM queued_messages WHERE session_id = $1", session_id)

    async def user_load(self, user_id: str) -> tuple[int, int]:
        """(messages, bytes of their text) queued in the user's sessions: their share."""
        row = await self.pool.fetchrow(
            USER_LOAD_SQL.format(arg="$1", bytes="octet_length(q.text)"), user_id)
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)
