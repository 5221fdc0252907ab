"""Start-up recovery of what a killed process left half-done (DESIGN §4 "Atomic operations").

All of it is here (`start_up`). Order matters: deletions a kill interrupted, half-made
session folders (a fork), then each session's intent record (an operation is finished or
rolled back), then runs left RUNNING (committed INTERRUPTED, `interrupt_on_disk`; a
sub-agent's in its worktree), then sub-agent worktrees nobody owns any more. Every step is
idempotent, so a kill during recovery is recovered by the next start. Git lock files a
killed writer left are removed first (`clear_stale_locks`).

What a killed turn left on disk is filtered before it is committed (`turn_leftovers`):
temporary files are deleted, never committed; a message file that does not parse, belongs to
another run, or repeats a seq already given on the branch is set aside, so no seq is given
twice and no broken file enters history.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import crash, guarded, journal, layout, names
from .errors import NotFound
from .git_session import DISK, HISTORY, RUNS, WORKTREES, GitSession, to_json_bytes
from .ids import now_iso
from .reindex import reindex, reindex_one
from .session_meta import purge_deleted
from .turns import snapshot_user_edits

if TYPE_CHECKING:
    from .braid import Braid

log = logging.getLogger("braid.recovery")
_SEQ = re.compile(r"^(\d+)-[a-z]+-[0-9A-Za-z_-]+\.json$")
ASIDE = "braid-set-aside"  # under .git: files recovery would not commit, kept for a human
_PROCESS_STARTED = time.time()


async def start_up(braid: Braid, fresh_index: bool) -> None:
    """Everything a killed process left, before any request is served."""
    team = braid.team
    # With other live processes on the data dir (a team server), their operations are
    # not half done: only runs whose process is gone are recovered (pg_team.py).
    alone = await team.start() if team is not None else True
    if alone:
        await purge_deleted(braid)  # deletions a killed server left half done
        # Half-done operations first, so runs are recovered on a consistent working tree.
        await recover_operations(braid)
    if fresh_index:
        await reindex(braid)
    if team is not None:
        await team.recover_orphans()
    else:
        await recover_interrupted(braid)
    if alone:
        await prune_orphan_worktrees(braid)
    if team is not None:
        await team.started()


async def recover_operations(braid: Braid) -> None:
    """Folders, then intents: before any run is recovered or any request is served."""
    root = braid.store.root
    for session_id in journal.recover_folders(root):
        await reindex_one(braid, session_id)
    for session_id in braid.store.all_ids():
        path = root / session_id
        if not (path / ".git" / journal.INTENT).exists():
            continue
        handle = braid.store.get(session_id)
        try:
            await handle.call(_settle_session)
        except Exception:  # noqa: BLE001 - one broken session must not stop the server
            log.exception("could not settle the operation left in session %s", session_id)


def _settle_session(git: GitSession) -> None:
    clear_stale_locks(git)
    journal.ensure_excludes(git)
    journal.recover(git)


def clear_stale_locks(git: GitSession, before: float | None = None) -> None:
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


def interrupt_on_disk(git: GitSession, run_id: str, since: float | None = None
                      ) -> dict[str, Any] | None:
    """Commit what a killed turn left on disk, with its run marked INTERRUPTED."""
    clear_stale_locks(git, since)
    records = [r for r in (git.path / RUNS).rglob(f"{run_id}.json") if r.is_file()]
    if not records:
        return None
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
    # files, broken files and repeated seqs are left out (turn_leftovers).
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
        run = await handle.call(lambda git, r=row["run_id"]: interrupt_on_disk(git, r, since))
        if run is None and str(row.get("branch") or "").startswith("sub_"):
            # Its files are in its worktree.
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


async def prune_orphan_worktrees(braid: Braid) -> None:
    """Sub-agent worktrees a dead process left (no sub-agent is live at start-up)."""
    for session_id in braid.store.all_ids():
        if not any((braid.store.root / session_id / ".git" / "worktrees").glob("*")):
            continue
        handle = braid.store.get(session_id)
        try:
            await handle.call(lambda git: prune_worktrees(git, keep=set()))
        except Exception:  # noqa: BLE001
            log.exception("could not prune the worktrees of session %s", session_id)


def recover_worktree(git: GitSession, name: str, run_id: str | None = None
                     ) -> dict[str, Any] | None:
    """Commit what a dead server left in a worktree on its branch (its RUNNING run becomes
    INTERRUPTED, as start-up recovery does for the parent's runs; other files are committed
    as `user-edit`: nothing is destroyed), then remove the worktree."""
    folder = git.path / WORKTREES / name
    run = None
    if (folder / ".git").exists():
        child = GitSession(folder)
        ids = [run_id] if run_id else [r.stem for r in sorted((folder / RUNS).rglob("*.json"))]
        for rid in ids:
            run = interrupt_on_disk(child, rid) or run
        snapshot_user_edits(child)
        child.flush_index()
    git.remove_worktree(name)
    return run


def prune_worktrees(git: GitSession, keep: set[str]) -> list[str]:
    """Recover and remove the worktrees a dead server left behind (live sub-agents' are in
    `keep`)."""
    removed = []
    for name in git.repo.list_worktrees():
        if name not in keep:
            recover_worktree(git, name)
            removed.append(name)
    return removed


def seq_of(name: str) -> int | None:
    match = _SEQ.match(name)
    return int(match.group(1)) if match else None


def turn_leftovers(git: GitSession, run_id: str, record_rel: str) -> dict[str, Any]:
    """What a killed turn of `run_id` left uncommitted, as checkpoint changes (DISK)."""
    journal.ensure_excludes(git)
    guarded.remove_temp_files(git.path, [HISTORY, RUNS])
    changes: dict[str, Any] = {}
    status = git.repo.status(untracked_files="all")
    floor = layout.next_seq(git)  # every seq below it is given on the branch already
    taken: set[int] = set()
    head = git.head_commit().tree
    for path in sorted(status):
        if not names.is_utf8(path):
            continue  # cannot be committed; left on disk for the user to rename
        if path.startswith(f"{HISTORY}/") and path in head:
            continue  # committed already; the dead process only left the index behind
        name = path.rsplit("/", 1)[-1]
        if guarded.is_temp(name) or path == record_rel:
            if guarded.is_temp(name):
                guarded.delete(git.path, path)
            continue
        if path.startswith(f"{HISTORY}/"):
            if not _own_message(git, path, run_id, floor, taken):
                _set_aside(git, path)
                continue
        elif path.startswith(f"{RUNS}/") and not _parses(git.path / path):
            _set_aside(git, path)
            continue
        if path == "session.json" or path.startswith((f"{HISTORY}/", "workdir/", f"{RUNS}/")):
            changes[path] = DISK
    return changes


def _parses(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_bytes()), dict)
    except (OSError, ValueError):
        return not path.exists()  # a deletion is fine


def _own_message(git: GitSession, rel: str, run_id: str, floor: int, taken: set[int]
                 ) -> bool:
    path = git.path / rel
    if not path.exists():
        return True  # a deletion of a committed file: the turn's own change
    seq = seq_of(path.name)
    try:
        msg = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    if seq is None or seq < floor or seq in taken or not isinstance(msg, dict):
        return False
    if msg.get("run_id") not in (run_id, None):
        return False
    taken.add(seq)
    return True


def _set_aside(git: GitSession, rel: str) -> None:
    """Move a file recovery will not commit out of the tracked tree (into .git), so nothing
    is destroyed and `git status` stays clean."""
    src = git.path / rel
    if not src.exists() and not src.is_symlink():
        return
    dest = Path(git.repo.path) / ASIDE / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    src.replace(dest)
    log.warning("set aside %s of session %s (not committed)", rel, git.path.name)
