"""Start-up recovery of what a killed process left half-done (DESIGN §4 "Atomic operations").

All of it is here (`start_up`). Order matters: after an unclean stop, refs at missing
objects rolled back (power_cut.py); deletions a kill interrupted, half-made
session folders (a fork), then each session's intent record (an operation is finished or
rolled back), then runs left RUNNING (committed INTERRUPTED, `agent.interrupted`; a
sub-agent's in its worktree), then sub-agent worktrees nobody owns any more. Every step is
idempotent, so a kill during recovery is recovered by the next start. Git lock files a
killed writer left are removed first (`clear_stale_locks`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.interrupted import clear_stale_locks, interrupt_run, prune_worktrees
from server.app import power_cut
from server.app.reindex import reindex, reindex_one
from server.features import session_meta, uploads
from server.features.sources import exporting
from server.git.session import GitSession
from server.store import journal

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.backends.pg_team import Team

log = logging.getLogger("braid.recovery")


async def start_up(braid: Services, team: Team | None, fresh_index: bool,
                   unclean: float | None = None) -> None:
    """Everything a killed process left, before any request is served. `team`: the team
    server this process joins (PostgreSQL), or None; `unclean`: when a process that did not
    stop cleanly (killed, or a power cut) started (its sessions checked: power_cut.py)."""
    # With other live processes on the data dir (a team server), their operations are
    # not half done: only runs whose process is gone are recovered (pg_team.py).
    alone = await team.start() if team is not None else True
    touched = await power_cut.check_sessions(braid, unclean) \
        if alone and unclean is not None else []
    if alone:
        await session_meta.purge_deleted(braid)  # deletions a killed server left half done
        # Half-done operations first, so runs are recovered on a consistent working tree.
        await recover_operations(braid)
    for session_id in touched:  # after the intents, before runs left RUNNING are recovered
        if braid.store.path(session_id).exists():
            await power_cut.reconcile(braid, session_id)
    if fresh_index:
        await reindex(braid)
    if team is not None:
        await team.recover_orphans()
    else:
        await recover_interrupted(braid)
    if alone:
        await prune_orphan_worktrees(braid)
    for session_id in touched:  # what the worktrees' recovery committed, indexed too
        if braid.store.path(session_id).exists():
            await power_cut.reconcile(braid, session_id)
    if team is not None:
        await team.started()


async def recover_operations(braid: Services) -> None:
    """Folders, then intents: before any run is recovered or any request is served."""
    root = braid.store.root
    kept, removed = journal.recover_folders(root)
    for session_id in kept:
        await reindex_one(braid, session_id)
    for session_id in removed:
        await session_meta.forget_rows(braid, session_id)
    for session_id in braid.store.all_ids():
        path = root / session_id
        if uploads.remove_staging(path):  # bodies a dead server was receiving
            log.warning("removed the unfinished uploads of session %s", session_id)
        if not (path / ".git" / journal.INTENT).exists() and \
                not (path / ".git" / exporting.RECORD).exists():
            continue
        handle = braid.store.get(session_id)
        try:
            await handle.call(_settle_session)
        except Exception:  # noqa: BLE001 - one broken session must not stop the server
            log.exception("could not settle the operation left in session %s", session_id)


def _settle_session(git: GitSession) -> None:
    clear_stale_locks(git)
    journal.ensure_excludes(Path(git.repo.path))
    journal.recover(git)
    exporting.finish_pending(git)  # an export to a folder a kill interrupted


async def recover_interrupted(braid: Services) -> None:
    for row in await braid.index.runs_with_status("RUNNING"):
        if braid.runs.find(row["session_id"], row["run_id"]):
            continue
        await interrupt_run(braid, row)


async def prune_orphan_worktrees(braid: Services) -> None:
    """Sub-agent worktrees a dead process left (no sub-agent is live at start-up)."""
    for session_id in braid.store.all_ids():
        if not any((braid.store.root / session_id / ".git" / "worktrees").glob("*")):
            continue
        handle = braid.store.get(session_id)
        try:
            await handle.call(lambda git: prune_worktrees(git, keep=set()))
        except Exception:  # noqa: BLE001
            log.exception("could not prune the worktrees of session %s", session_id)


