"""Start-up recovery of what a killed process left half-done (DESIGN §4 "Atomic operations").

Order matters: half-made session folders first (a fork), then each session's intent record
(an operation is finished or rolled back), then runs left RUNNING (committed INTERRUPTED,
`braid._interrupt_on_disk`), then sub-agent worktrees nobody owns any more. Every step is
idempotent, so a kill during recovery is recovered by the next start.

What a killed turn left on disk is filtered before it is committed (`turn_leftovers`):
temporary files are deleted, never committed; a message file that does not parse, belongs to
another run, or repeats a seq already given on the branch is set aside, so no seq is given
twice and no broken file enters history.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import guarded, journal, names
from .git_session import DISK, HISTORY, RUNS, GitSession

if TYPE_CHECKING:
    from .braid import Braid

log = logging.getLogger("braid.recovery")
_SEQ = re.compile(r"^(\d+)-[a-z]+-[0-9A-Za-z_-]+\.json$")
ASIDE = "braid-set-aside"  # under .git: files recovery would not commit, kept for a human


async def recover_operations(braid: Braid) -> None:
    """Folders, then intents: before any run is recovered or any request is served."""
    root = braid.store.root
    for session_id in journal.recover_folders(root):
        await _reindex_one(braid, session_id)
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
    from .braid import _clear_stale_locks

    _clear_stale_locks(git)
    journal.ensure_excludes(git)
    journal.recover(git)


async def _reindex_one(braid: Braid, session_id: str) -> None:
    from .braid import _read_session

    handle = braid.store.get(session_id)
    meta, runs = await handle.call(_read_session)
    await braid.index.upsert_session(meta)
    for run in runs:
        await braid.index.upsert_run(session_id, run)


async def prune_worktrees(braid: Braid) -> None:
    """Sub-agent worktrees a dead process left (no sub-agent is live at start-up)."""
    from .subagents import prune_worktrees as prune

    for session_id in braid.store.all_ids():
        if not any((braid.store.root / session_id / ".git" / "worktrees").glob("*")):
            continue
        handle = braid.store.get(session_id)
        try:
            await handle.call(lambda git: prune(git, keep=set()))
        except Exception:  # noqa: BLE001
            log.exception("could not prune the worktrees of session %s", session_id)


def seq_of(name: str) -> int | None:
    match = _SEQ.match(name)
    return int(match.group(1)) if match else None


def turn_leftovers(git: GitSession, run_id: str, record_rel: str) -> dict[str, Any]:
    """What a killed turn of `run_id` left uncommitted, as checkpoint changes (DISK)."""
    journal.ensure_excludes(git)
    guarded.remove_temp_files(git.path, [HISTORY, RUNS])
    changes: dict[str, Any] = {}
    status = git.repo.status(untracked_files="all")
    floor = git.next_seq()  # every seq below it is given on the branch already
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
