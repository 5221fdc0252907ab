"""`Braid`: the core's context object — settings, stores, the event bus, live runs — and its
lifecycle (recovery of interrupted runs at start, clean stop)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import crash
from .backends import make_index, make_team, make_users
from .backups import install_hooks as install_backup_hooks
from .errors import NotFound
from .git_session import RUNS, GitSession, to_json_bytes
from .ids import now_iso
from .memory import give_back_memory, limit_arenas
from .model_client import ModelClient
from .packing import Packer
from .pools import IdlingThreadPool
from .recovery import prune_worktrees, recover_operations, turn_leftovers
from .session_meta import purge_deleted
from .settings import Settings
from .store import SessionStore
from .users import DEFAULT_USER, new_token

log = logging.getLogger("braid")
_PROCESS_STARTED = time.time()

# (git, turn_id, abs_path) — called before a tool mutates a file (backups hook in here).
BeforeWrite = Callable[[GitSession, str, str], None]
# (git, turn_id, workdir-relative paths changed so far) — after a shell command ran.
AfterShell = Callable[[GitSession, str, list[str]], None]


class Braid:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = SessionStore(self.data_dir / "sessions")
        # SQLite files in the data dir, or PostgreSQL with BRAID_DATABASE_URL (backends.py):
        # then `team` coordinates several processes (the bus, branch locks, dead runs).
        self.index = make_index(settings)
        self.users = make_users(settings)
        self.team, self.bus, self.runs = make_team(self, settings)
        self.packer = Packer()  # packs idle sessions' loose objects in the background
        self.model = ModelClient(settings)
        self.before_write_hooks: list[BeforeWrite] = []
        self.after_shell_hooks: list[AfterShell] = []
        self.extensions: dict[str, Any] = {}
        self._reaper: asyncio.Task[None] | None = None
        install_backup_hooks(self)  # per-turn backups (DESIGN §4 "Revert a turn")

    async def start(self) -> str:
        """Open the index and recover runs a killed server left RUNNING. Returns the default
        user's token (to print in the login URL)."""
        limit_arenas()
        # The loop's default executor (new session folders, packing, deletes) gives its
        # threads back when quiet, as idle sessions do theirs (D14).
        asyncio.get_running_loop().set_default_executor(IdlingThreadPool(
            max_workers=min(32, (os.cpu_count() or 1) + 4),
            idle_seconds=self.settings.idle_seconds, name="braid-pool"))
        fresh_index = await self.index.open()
        # With other live processes on the data dir (a team server), their operations are
        # not half done: only runs whose process is gone are recovered (pg_team.py).
        alone = await self.team.start() if self.team is not None else True
        if alone:
            await purge_deleted(self)  # deletions a killed server left half done
            # Half-done operations first, so runs are recovered on a consistent working tree.
            await recover_operations(self)
        if fresh_index:
            await reindex(self)
        if self.team is not None:
            await self.team.recover_orphans()
        else:
            await recover_interrupted(self)
        if alone:
            await prune_worktrees(self)
        if self.team is not None:
            await self.team.started()
        self._reaper = asyncio.create_task(self._release_idle(), name="braid-idle")
        return self.users.set_token(DEFAULT_USER, self.settings.token or self._local_token())

    def _local_token(self) -> str:
        """Without BRAID_TOKEN, the default user's token is made once and kept in the data
        dir (readable by its owner only), so a restart does not log open pages out."""
        path = self.data_dir / "token"
        if path.exists():
            token = path.read_text().strip()
            if token:
                return token
        token = new_token()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    async def _release_idle(self) -> None:
        """Idle sessions give back their thread and repository (D14), now and then."""
        step = max(0.5, min(5.0, self.settings.idle_seconds / 2))
        while True:
            await asyncio.sleep(step)
            live = frozenset(a.session_id for a in self.runs.all())
            released = self.store.release_idle(self.settings.idle_seconds,
                                               self.settings.open_sessions, live)
            if released and not live:  # quiet: the freed heap goes back to the system
                await asyncio.to_thread(give_back_memory)

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for active in self.runs.all():
            active.stop("shutdown")
        for active in self.runs.all():
            try:
                await asyncio.wait_for(active.done.wait(), timeout=10)
            except TimeoutError:
                log.warning("run %s did not stop in time", active.run_id)
        await self.packer.close()
        await self.model.close()
        if self.team is not None:
            await self.team.stop()
        await self.index.close()
        self.users.close()
        self.store.close()


def _clear_stale_locks(git: GitSession, before: float | None = None) -> None:
    """Remove the lock files a server killed mid-write left in .git: git never clears them
    itself, and one left behind would stop every later write (and this recovery, and so the
    server's start). Only locks older than this process are removed: only Braid writes here.
    (`before`: older than that time, when another process died and this one recovers.)"""
    cutoff = _PROCESS_STARTED if before is None else before
    # repo.path is the git dir (a linked worktree has its own, with its own index and HEAD);
    # branch refs live in the common dir.
    git_dir = Path(git.repo.path)
    pointer = git_dir / "commondir"
    common = (git_dir / pointer.read_text().strip()).resolve() if pointer.exists() else git_dir
    for lock in {git_dir / "index.lock", git_dir / "HEAD.lock", common / "index.lock",
                 *(common / "refs" / "heads").rglob("*.lock")}:
        try:
            if lock.stat().st_mtime < cutoff:
                lock.unlink()
                log.warning("removed stale lock %s", lock)
        except FileNotFoundError:
            pass


def _interrupt_on_disk(git: GitSession, run_id: str, since: float | None = None
                       ) -> dict[str, Any] | None:
    """Commit what a killed turn left on disk, with its run marked INTERRUPTED."""
    _clear_stale_locks(git, since)
    records = [r for r in (git.path / RUNS).rglob(f"{run_id}.json") if r.is_file()]
    if not records:
        return None
    import json

    try:
        run = json.loads(records[0].read_text())
    except ValueError:  # written atomically since; an older server's torn record
        log.warning("run record %s does not parse", records[0])
        return None
    if run.get("status") != "RUNNING":
        return run
    run["status"] = "INTERRUPTED"
    run["updated_at"] = now_iso()
    rel = str(records[0].relative_to(git.path))
    # session.json too: a session's first turn gives it its title before any commit. Temp
    # files, broken files and repeated seqs are left out (recovery.turn_leftovers).
    changes: dict[str, Any] = turn_leftovers(git, run_id, rel)
    changes[rel] = to_json_bytes(run)
    git.write_checkpoint(changes, summary="Run interrupted", kind="turn", run_id=run_id,
                         message_index=run.get("message_count"))
    crash.at("recovery.after_commit")
    # The dead process may have left index entries unwritten: rebuild the index from HEAD
    # (stat data is lost, so the next status rehashes once, but it tells the truth).
    index = git.repo.index
    index.read_tree(git.head_commit().tree)
    index.write()
    return run


async def recover_interrupted(braid: Braid) -> None:
    for row in await braid.index.runs_with_status("RUNNING"):
        if braid.runs.find(row["session_id"], row["run_id"]):
            continue
        await interrupt_run(braid, row)


async def interrupt_run(braid: Braid, row: dict[str, Any], since: float | None = None
                        ) -> dict[str, Any] | None:
    """Commit a run whose process died as INTERRUPTED and index it; None for an unknown
    session. `since`: git lock files older than that are the dead process's."""
    try:
        handle = braid.store.get(row["session_id"])
    except NotFound:
        return None
    try:
        run = await handle.call(lambda git, r=row["run_id"]: _interrupt_on_disk(git, r, since))
        if run is None and str(row.get("branch") or "").startswith("sub_"):
            from .subagents import recover_worktree  # its files are in its worktree

            run = await handle.call(lambda git, r=row: recover_worktree(
                git, r["branch"], r["run_id"]))
    except Exception:  # noqa: BLE001 - one broken session must not stop the server
        log.exception("could not recover run %s of session %s", row["run_id"],
                      row["session_id"])
        run = None
    row = dict(row, status="INTERRUPTED", updated_at=now_iso())
    run = run or row
    await braid.index.upsert_run(row["session_id"], run)
    return run


def _read_session(git: GitSession) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """session.json and every run record on every branch (a sibling run lives on its own
    branch; the record on the run's own branch wins)."""
    meta = git.read_json(git.head_commit(), "session.json")
    runs: dict[str, dict[str, Any]] = {}
    for name, tip in git.branches().items():
        commit = git.commit(tip)
        for run in git.iter_runs(commit):
            known = runs.get(run["run_id"])
            if known is None or run.get("branch") == name:
                runs[run["run_id"]] = dict(run)
    # A turn killed before its first checkpoint left its RUNNING record on disk only: listed
    # so that start-up recovery commits it as INTERRUPTED even when the index was lost too.
    import json

    for record in (git.path / RUNS).rglob("*.json"):  # either layout
        if record.stem in runs:
            continue
        try:
            run = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(run, dict) and run.get("status") == "RUNNING" and run.get("run_id"):
            runs[str(run["run_id"])] = run
    return meta, list(runs.values())


async def reindex(braid: Braid) -> tuple[int, int]:
    """Rebuild the index (index.sqlite3, or PostgreSQL's) from the repositories alone."""
    await braid.index.clear()
    n_sessions = n_runs = 0
    for session_id in braid.store.all_ids():
        handle = braid.store.get(session_id)
        meta, runs = await handle.call(_read_session)
        updated = max([r.get("updated_at") or r["created_at"] for r in runs] or
                      [meta["created_at"]])
        await braid.index.upsert_session(meta, updated)
        for run in runs:
            await braid.index.upsert_run(session_id, run)
        n_sessions += 1
        n_runs += len(runs)
    return n_sessions, n_runs
