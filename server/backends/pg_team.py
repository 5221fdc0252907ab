"""Several Braid processes on one data dir and one PostgreSQL (BRAID_DATABASE_URL).

- Branch locks: one run at a time per (session, branch) across processes, as a session-level
  advisory lock held on this process's lock connection (`pg_conn.PgThread`) from claim to
  release. A process that dies loses its connection, and with it its locks.
- Ownership: `braid_processes` has a row per live process whose `seen_at` a heartbeat moves
  every `HEARTBEAT` seconds; `braid_live_runs` names the process holding each claimed branch
  and its run.
- Dead runs: every `HEARTBEAT` each process looks for runs the index says are RUNNING that no
  fresh process holds. It takes the branch lock first, which only succeeds once the owner's
  connection is gone (a slow but live owner keeps its lock, so it is never taken over), then
  commits the run INTERRUPTED (resumable like any interrupted run) and tells every tab.
- Cancel: `cancel_run` of a run another process drives is sent to every process on the
  control channel; its owner stops it, and the caller waits for the run's end.
- Other processes' runs are followed from their events (`pg_runs.PgRunRegistry.observe`);
  an event that changes a session's `session.json` reloads it here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any, cast

from server.backends.pg_bus import PgEventBus
from server.backends.pg_conn import PgThread
from server.backends.pg_index import PgIndex
from server.backends.pg_locks import PgBranchLocks
from server.backends.pg_runs import PgRunRegistry, RemoteRun
from server.base import events
from server.base.errors import BraidError, Busy
from server.base.ids import new_message_id
from server.base.proctree import pid_alive
from server.base.records import RunRow
from server.base.results import EventFrame, RunStatus
from server.features.session_meta import settle
from server.git.branches import is_sub
from server.store import session_settings

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.pg")
HEARTBEAT = 1.0  # seconds between heartbeats (and looks for dead runs)
STALE = 3.0  # a process not seen for this long may be dead (its locks decide)
CONTROL = "braid_control"
SCHEMA = """
CREATE TABLE IF NOT EXISTS braid_processes (
    owner_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    port INTEGER,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS braid_live_runs (
    session_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    run_id TEXT NOT NULL DEFAULT '',
    owner_id TEXT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, branch)
);
"""
SCHEMA_LOCK = 0x6272616966
STARTUP_LOCK = 0x6272616967  # one process at a time runs its start-up recovery
# Runs the index says are RUNNING with no fresh process holding their branch ($1: processes
# known dead though seen lately, fresh or not).
ORPHANS = f"""
SELECT r.session_id, r.run_id, r.branch FROM runs r
WHERE r.status = 'RUNNING' AND NOT EXISTS (
    SELECT 1 FROM braid_live_runs l JOIN braid_processes p USING (owner_id)
    WHERE l.session_id = r.session_id AND l.branch = COALESCE(r.branch, 'main')
      AND p.seen_at > now() - interval '{STALE} seconds' AND p.owner_id <> ALL($1::text[]))
"""
RETRY = 60.0  # seconds before a run whose recovery failed is tried again


class Team:
    def __init__(self, braid: Services, url: str) -> None:
        self.braid = braid
        self.url = url
        self.owner_id = f"{socket.gethostname()}-{os.getpid()}-{new_message_id()[:8]}"
        self.locks = PgThread(url, "braid-pg-locks")
        self.bus = PgEventBus(url, self.owner_id)
        self.runs = PgRunRegistry(self.send_cancel)
        self.branch_locks = PgBranchLocks(self.locks, self.runs, self.owner_id)
        self.bus.on_remote = self._on_remote
        self._tasks: list[asyncio.Task[None]] = []
        self._control: Any = None
        self._sending: set[asyncio.Task[None]] = set()
        # (session, run) -> when to try again: a recovery that failed left the run as git
        # has it (RUNNING), and is not retried every heartbeat.
        self._retry_at: dict[tuple[str, str], float] = {}

    @property
    def pool(self) -> Any:
        index = self.braid.index
        assert isinstance(index, PgIndex)  # a team is made only with PostgreSQL (choose.py)
        return index.pool

    async def start(self) -> bool:
        """Join the team. Returns True when no other live process was seen: start-up
        recovery of half-done operations is then safe (nobody is in the middle of one).
        Holds the start-up lock until `started()`: two processes starting at once do not
        both recover."""
        import asyncpg

        await self.locks.arun(lambda db: db.execute("SELECT pg_advisory_lock($1)",
                                                    STARTUP_LOCK))
        async with self.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            await db.execute(SCHEMA)
        port = getattr(self.braid.settings, "port", None)
        # A process seen lately is alive unless it ran on this host and its pid is gone: a
        # server killed (or cut off by a power cut) and started again within STALE seconds
        # must still recover what it left half done (tests/faults/test_powercut_team.py).
        here = socket.gethostname()
        seen = await self.pool.fetch(
            f"SELECT pid, host FROM braid_processes WHERE seen_at > now() - interval "
            f"'{STALE} seconds'")
        alone = not [r for r in seen if r["host"] != here or pid_alive(int(r["pid"]))]
        await self.pool.execute(
            "INSERT INTO braid_processes (owner_id, pid, host, port) VALUES ($1, $2, $3, $4)",
            self.owner_id, os.getpid(), socket.gethostname(), port)
        await self.bus.start()
        self._control = await asyncpg.connect(self.url)
        await self._control.add_listener(CONTROL, self._on_control)
        return alone

    async def started(self) -> None:
        """Start-up recovery is over: beat (a long recovery must not look dead to the next
        process starting), let the next process start, and keep beating."""
        await self.beat()
        await self.locks.arun(lambda db: db.execute("SELECT pg_advisory_unlock($1)",
                                                    STARTUP_LOCK))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="braid-heartbeat"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        await self.bus.stop()
        if self._control is not None and not self._control.is_closed():
            await self._control.close()
        try:
            await self.pool.execute("DELETE FROM braid_processes WHERE owner_id = $1",
                                    self.owner_id)
        except Exception:  # noqa: BLE001 - stopping: the row goes stale by itself
            log.warning("could not remove this process's row")
        await asyncio.get_running_loop().run_in_executor(None, self.locks.close)

    # -- heartbeat and dead runs ----------------------------------------------------------

    async def _heartbeat(self) -> None:
        last_prune = time.monotonic()
        while True:
            try:
                await self.beat()
                await self.recover_orphans()
                if time.monotonic() - last_prune > 60:
                    last_prune = time.monotonic()
                    await self.bus.prune()
                    await self.pool.execute(
                        "DELETE FROM braid_processes WHERE seen_at < now() - interval "
                        "'1 hour'")
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next beat tries again
                log.exception("team heartbeat failed")
            await asyncio.sleep(HEARTBEAT)

    async def beat(self) -> None:
        """This process is alive; its claims carry their current run ids; the runs it
        follows are those live processes hold."""
        rows = [(a.session_id, a.branch, a.run_id) for a in self.runs.all()]
        asof = time.monotonic()
        # No transaction: one held here across an await would keep row locks that a claim
        # or release (a synchronous call on the lock connection, which blocks this event
        # loop) waits for, and neither could go on.
        async with self.pool.acquire() as db:
            await db.execute("UPDATE braid_processes SET seen_at = now() WHERE owner_id = $1",
                             self.owner_id)
            if rows:  # one statement (it commits by itself)
                sids, branches, run_ids = (list(col) for col in zip(*rows, strict=True))
                await db.execute(
                    "UPDATE braid_live_runs l SET run_id = v.run_id FROM unnest("
                    "$1::text[], $2::text[], $3::text[]) AS v(session_id, branch, run_id) "
                    "WHERE l.session_id = v.session_id AND l.branch = v.branch "
                    "AND l.owner_id = $4 AND l.run_id <> v.run_id",
                    sids, branches, run_ids, self.owner_id)
            held = await db.fetch(
                "SELECT l.session_id, l.branch FROM braid_live_runs l JOIN braid_processes p "
                f"USING (owner_id) WHERE p.seen_at > now() - interval '{STALE} seconds' "
                "AND l.owner_id <> $1", self.owner_id)
        self.runs.reconcile({(r["session_id"], r["branch"]) for r in held}, asof)

    async def dead_here(self) -> list[str]:
        """Processes of this host whose pid is gone, however lately seen: a server killed
        (or cut off by a power cut) and started again within STALE seconds recovers their
        runs at its start, before any request, not a heartbeat later (the team power-cut
        test found runs RUNNING in PostgreSQL that git lacked, after the start)."""
        here = socket.gethostname()
        rows = await self.pool.fetch(
            "SELECT owner_id, pid FROM braid_processes WHERE host = $1 AND owner_id <> $2",
            here, self.owner_id)
        return [str(r["owner_id"]) for r in rows if not pid_alive(int(r["pid"]))]

    async def recover_orphans(self) -> int:
        """Commit INTERRUPTED every RUNNING run whose process is gone. Returns how many."""
        from server.agent.interrupted import interrupt_run

        done = 0
        now = time.monotonic()
        self._retry_at = {k: t for k, t in self._retry_at.items() if t > now}
        for row in await self.pool.fetch(ORPHANS, await self.dead_here()):
            sid, run_id, branch = row["session_id"], row["run_id"], row["branch"] or "main"
            if self.runs.local(sid, run_id) or (sid, run_id) in self._retry_at:
                continue
            try:
                lease = await self.branch_locks.acquire(sid, branch)
            except Busy:
                continue  # its owner still holds the branch: alive, or this process has it
            try:
                run = await interrupt_run(self.braid, cast(RunRow, dict(row)), since=time.time())
            finally:
                await lease.release()
            for followed in self.runs.for_session(sid):
                if followed.run_id == run_id and isinstance(followed, RemoteRun):
                    self.runs.forget(followed)
            if run is None:  # forgotten (its row is gone), or not recovered: later
                self._retry_at[(sid, run_id)] = time.monotonic() + RETRY
            else:
                done += 1
                log.warning("run %s of session %s: its process is gone; INTERRUPTED",
                            run_id, sid)
                self.bus.publish(sid, events.run_ended("INTERRUPTED", run_id, run, [],
                                                       reason="its process stopped"))
                self.bus.publish(sid, events.dag_changed(run_id=run_id))
        return done

    # -- cancel across processes ----------------------------------------------------------

    async def cancel_remote(self, session_id: str, run_id: str | None
                            ) -> RunStatus | None:
        """Stop a run another process drives; None when no live process holds one."""
        rows = await self.pool.fetch(
            "SELECT l.branch, r.run_id FROM braid_live_runs l JOIN runs r ON "
            "r.session_id = l.session_id AND COALESCE(r.branch, 'main') = l.branch "
            "AND r.status = 'RUNNING' WHERE l.session_id = $1 AND l.owner_id <> $2",
            session_id, self.owner_id)
        rows = [r for r in rows if run_id is None or r["run_id"] == run_id]
        if not rows:
            return None
        target = next((r for r in rows if not is_sub(r["branch"])), rows[0])
        wanted = str(target["run_id"])
        await self._send_cancel(session_id, wanted)
        status = "RUNNING"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = await self.pool.fetchval(
                "SELECT status FROM runs WHERE session_id = $1 AND run_id = $2",
                session_id, wanted) or "CANCELLED"
            if status != "RUNNING":
                break
            await asyncio.sleep(0.05)
        return {"run_id": wanted, "status": status}

    def send_cancel(self, session_id: str, run_id: str) -> None:
        """From synchronous code (`RemoteRun.stop`): sent in the background."""
        task = asyncio.get_running_loop().create_task(self._send_cancel(session_id, run_id))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_cancel(self, session_id: str, run_id: str) -> None:
        await self.pool.execute("SELECT pg_notify($1, $2)", CONTROL, json.dumps(
            {"op": "cancel", "session_id": session_id, "run_id": run_id}))

    # -- approvals across processes -------------------------------------------------------

    async def send_approval(self, session_id: str, run_id: str, call_id: str,
                            decision: str, reason: str) -> None:
        """An answer to a call waiting in a run another process drives: its owner settles
        it (`features.session_meta.settle`)."""
        await self.pool.execute("SELECT pg_notify($1, $2)", CONTROL, json.dumps(
            {"op": "approve", "session_id": session_id, "run_id": run_id,
             "call_id": call_id, "decision": decision, "reason": reason}))

    def _settle(self, message: dict[str, Any]) -> None:
        sid, run_id = str(message.get("session_id")), str(message.get("run_id"))
        if self.runs.local(sid, run_id) is None:
            return  # another process's run
        task = asyncio.get_running_loop().create_task(self._answer(
            sid, run_id, str(message.get("call_id")), str(message.get("decision")),
            str(message.get("reason") or "")))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _answer(self, sid: str, run_id: str, call_id: str, decision: str,
                      reason: str) -> None:
        try:
            await settle(self.braid, sid, run_id, call_id, decision, reason)
        except Exception:  # noqa: BLE001 - the call waits on; the user may answer again
            log.exception("could not settle call %s of run %s", call_id, run_id)

    def _on_remote(self, frame: EventFrame) -> None:
        """An event of another process: follow its runs, and reload a session.json it
        changed (the title a first turn gave, a rename)."""
        self.runs.observe(frame)
        event, data = frame.get("event"), frame.get("data") or {}
        sid = data.get("session_id")
        if event == "session_deleted" and isinstance(sid, str):
            self.braid.store.forget(sid)
        elif (event == "run_started" and data.get("titled")) or event == "session_updated":
            if not isinstance(sid, str):  # names no session
                return
            try:
                handle = self.braid.store.get(sid)
                meta = session_settings.load(handle.path)
            except (BraidError, OSError, ValueError):
                return
            kept = cast("dict[str, object]", handle.meta)  # the same object: others hold it
            kept.clear()
            kept.update(meta)

    def _on_control(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if message.get("op") == "approve":
            self._settle(message)
        elif message.get("op") == "cancel":
            active = self.runs.local(str(message.get("session_id")),
                                     str(message.get("run_id")))
            if active is not None:
                log.info("run %s cancelled from another process", active.run_id)
                active.stop("cancel")


