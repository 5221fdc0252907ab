"""Branch locks of a team server (the `locks.BranchLocks` interface): one holder per
(session, branch) across every process on the data dir.

A hold is taken in this process first (`LocalBranchLocks`), then as the (session, branch)
advisory lock on this process's lock connection (`pg_conn.PgThread`), and this process is
named in `braid_live_runs` (the heartbeat fills in the run id); `Busy` when another process
holds it. A process that dies loses its connection, and with it its locks. The lock calls
run on the lock connection's thread without an `await`, as the claim they replace did: a
cancel cannot leave one half taken or half released.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from server.backends.pg_conn import PgThread, lock_key
from server.backends.pg_runs import PgRunRegistry
from server.base.errors import Busy
from server.store.locks import BranchLocks, Lease, LocalBranchLocks

log = logging.getLogger("braid.pg")
RETRY = 0.1  # seconds between tries of a waiting hold another process has


class PgBranchLocks(BranchLocks):
    def __init__(self, locks: PgThread, runs: PgRunRegistry, owner_id: str) -> None:
        self.locks = locks  # the team's connection for advisory locks
        self.runs = runs  # to see the branches other processes drive
        self.owner_id = owner_id
        self.local = LocalBranchLocks()

    async def acquire(self, session_id: str, branch: str, *, wait: bool = False) -> Lease:
        while True:
            lease = await self.local.acquire(session_id, branch, wait=wait)
            try:
                got = self.locks.run(self._lock(session_id, branch))
            except BaseException:
                await lease.release()
                raise
            if got:
                return PgLease(self, lease)
            await lease.release()
            if not wait:
                raise Busy(f"a run is already going on branch {branch} (in another process)")
            await asyncio.sleep(RETRY)

    async def held(self, session_id: str) -> set[str]:
        return await self.local.held(session_id) | self.runs.remote_branches(session_id)

    def _lock(self, session_id: str, branch: str) -> Any:
        owner = self.owner_id

        async def lock(db: Any) -> bool:
            if not await db.fetchval("SELECT pg_try_advisory_lock($1)",
                                     lock_key(session_id, branch)):
                return False
            await db.execute(
                "INSERT INTO braid_live_runs (session_id, branch, run_id, owner_id) "
                "VALUES ($1, $2, '', $3) ON CONFLICT (session_id, branch) DO UPDATE "
                "SET run_id = EXCLUDED.run_id, owner_id = EXCLUDED.owner_id, "
                "claimed_at = now()", session_id, branch, owner)
            return True

        return lock

    def unlock(self, session_id: str, branch: str) -> None:
        owner = self.owner_id

        async def unlock(db: Any) -> None:
            await db.execute(
                "DELETE FROM braid_live_runs WHERE session_id = $1 AND branch = $2 "
                "AND owner_id = $3", session_id, branch, owner)
            await db.fetchval("SELECT pg_advisory_unlock($1)", lock_key(session_id, branch))

        try:
            self.locks.run(unlock)
        except Exception:  # noqa: BLE001 - the lock goes with the connection anyway
            log.exception("could not release branch %s of session %s", branch, session_id)


class PgLease(Lease):
    def __init__(self, locks: PgBranchLocks, local: Lease) -> None:
        super().__init__(local.session_id, local.branch)
        self.locks = locks
        self.local = local
        self.released = False

    async def release(self) -> None:
        if not self.released:
            self.released = True
            self.locks.unlock(self.session_id, self.branch)
        await self.local.release()
