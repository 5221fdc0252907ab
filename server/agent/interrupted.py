"""What a killed process left of a run: its record found (pending or committed), its files
committed with the run marked INTERRUPTED (`interrupt_on_disk`, `interrupt_run`), a dead
sub-agent's worktree recovered and removed, and stale git lock files cleared. Start-up
recovery (`app.recovery`) and a team server's watch for dead processes
(`backends.pg_team`) both use it; so does a sub-agent's spawn (`prune_worktrees`).

What a killed turn left on disk is filtered before it is committed (`turn_leftovers`):
temporary files are deleted, never committed; a message file that does not parse, belongs to
another run, or repeats a seq already given on the branch is set aside, so no seq is given
twice and no broken file enters history."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pygit2

from server.agent.turn_context import snapshot_user_edits
from server.base import crash
from server.base.errors import NotFound
from server.base.ids import now_iso
from server.base.records import RunRecord, RunRow, to_json_bytes
from server.git.branches import is_sub
from server.git.history import HISTORY, RUNS
from server.git.session import WORKTREES, Change, GitSession
from server.git.workdir import guarded
from server.git.workdir.index_format import clear_stale_lock
from server.git.workdir.scan import WORKDIR
from server.git.workdir.staging import DISK, porcelain
from server.store import journal, layout
from server.store.search import run_rows_on_head

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.recovery")
_SEQ = re.compile(r"^(\d+)-[a-z]+-[0-9A-Za-z_-]+\.json$")
ASIDE = "braid-set-aside"  # under .git: files recovery would not commit, kept for a human


def clear_stale_locks(git: GitSession, before: float | None = None) -> None:
    """Remove the lock files a server killed mid-write left in .git: git never clears them
    itself, and one left behind would stop every later write (and this recovery, and so the
    server's start). Only locks older than this process are removed: only Braid writes here.
    (`before`: older than that time, when another process died and this one recovers.)"""
    # repo.path is the git dir (a linked worktree has its own, with its own index and HEAD);
    # branch refs live in the common dir.
    git_dir = Path(git.repo.path)
    pointer = git_dir / "commondir"
    common = (git_dir / pointer.read_text().strip()).resolve() if pointer.exists() else git_dir
    for lock in {git_dir / "index.lock", git_dir / "HEAD.lock", common / "index.lock",
                 *(common / "refs" / "heads").rglob("*.lock")}:
        clear_stale_lock(lock, before)


def find_record(git: GitSession, run_id: str) -> tuple[str, RunRecord] | None:
    """(path, record) of run `run_id`: the pending one a live turn wrote (a new run, or a
    resumed one) when it is newer than HEAD's, else HEAD's (a kill right after a commit can
    leave the pending record behind it)."""
    rel = layout.find_run_path(git, run_id) if not git.repo.head_is_unborn else None
    head: RunRecord | None = git.read_json(git.head_commit(), rel).copy() if rel else None
    for path in sorted(git.pending.paths()):
        if path.startswith(f"{RUNS}/") and path.rsplit("/", 1)[-1] == f"{run_id}.json":
            try:
                pending = cast(RunRecord, dict(json.loads(git.pending.read(path) or b"")))
            except (ValueError, TypeError):  # written atomically: a foreign file
                log.warning("run record %s does not parse", path)
                continue
            if head is None or str(pending.get("updated_at")) > str(head.get("updated_at")):
                return path, pending
            git.pending.drop([path])
    return (rel, head) if rel and head is not None else None


def interrupt_on_disk(git: GitSession, run_id: str, since: float | None = None
                      ) -> RunRecord | None:
    """Commit what a killed turn left (its pending files, its workdir changes), with its run
    marked INTERRUPTED."""
    clear_stale_locks(git, since)
    found = find_record(git, run_id)
    if found is None:
        return None
    rel, run = found
    if run.get("status") != "RUNNING":
        return run
    run["status"] = "INTERRUPTED"
    run["updated_at"] = now_iso()
    # session.json too: a session's first turn gives it its title before any commit. Temp
    # files, broken files and repeated seqs are left out (turn_leftovers).
    changes = turn_leftovers(git, run_id, rel)
    changes[rel] = to_json_bytes(run)
    git.write_checkpoint(changes, summary="Run interrupted", kind="turn", run_id=run_id,
                         message_index=run.get("message_count"))
    crash.at("recovery.after_commit")
    # The dead process may have left index entries unwritten: rebuild the index from HEAD
    # (entries whose blob is unchanged keep their stat data).
    git.index.reset()
    return run


async def interrupt_run(braid: Services, row: RunRow, since: float | None = None
                        ) -> RunRecord | RunRow | None:
    """Commit a run whose process died as INTERRUPTED and index it; None for an unknown
    session, a run with nothing on disk (a power cut before its first record was synced:
    its row goes), or one whose commit failed (its row is left as it was: the index says
    what git says, and the next recovery tries again). `since`: git lock files older than
    that are the dead process's."""
    try:
        handle = braid.store.get(row["session_id"])
    except NotFound:
        return None
    try:
        run_id = row["run_id"]
        run = await handle.call(lambda git: interrupt_on_disk(git, run_id, since))
        if run is None and is_sub(str(row.get("branch") or "")):
            branch = str(row["branch"])  # its files are in its worktree
            run = await handle.call(lambda git: recover_worktree(git, branch, run_id))
    except Exception:  # noqa: BLE001 - one broken session must not stop the server
        # Not marked INTERRUPTED in the index while git still says RUNNING: git is what is
        # durable (DESIGN "Durability"), and a row no longer RUNNING is never recovered.
        log.exception("could not recover run %s of session %s", row["run_id"],
                      row["session_id"])
        return None
    if run is None:
        # Indexed, but nothing of it on disk (its first record was not yet synced when
        # the power went): the last durable state has no such run (DESIGN "Durability").
        log.warning("run %s of session %s left nothing on disk: forgotten",
                    row["run_id"], row["session_id"])
        await braid.index.delete_run(row["session_id"], row["run_id"])
        return None
    await braid.index.upsert_run(row["session_id"], run)
    # Its messages' words too (search.py); the kill may have lost them.
    sid, rid = handle.session_id, row["run_id"]
    await braid.search.add(await handle.call(lambda git: run_rows_on_head(git, sid, rid)))
    return run


def recover_worktree(git: GitSession, name: str, run_id: str | None = None
                     ) -> RunRecord | None:
    """Commit what a dead server left in a worktree on its branch (its RUNNING run becomes
    INTERRUPTED, as start-up recovery does for the parent's runs; other files are committed
    as `user-edit`: nothing is destroyed), then remove the worktree."""
    folder = git.path / WORKTREES / name
    run = None
    if (folder / ".git").exists():
        child = GitSession(folder)
        ids = [run_id] if run_id else running_ids(child)
        for rid in ids:
            run = interrupt_on_disk(child, rid) or run
        snapshot_user_edits(child)
        child.index.flush()
    git.remove_worktree(name)
    return run


def running_ids(git: GitSession) -> list[str]:
    """The runs a dead process may have left RUNNING: pending records and HEAD's."""
    ids = [rel.rsplit("/", 1)[-1][:-5] for rel in sorted(git.pending.paths())
           if rel.startswith(f"{RUNS}/") and rel.endswith(".json")]
    if not git.repo.head_is_unborn:
        ids += [str(r["run_id"]) for r in layout.runs(git) if r.get("status") == "RUNNING"]
    return list(dict.fromkeys(ids))


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


def turn_leftovers(git: GitSession, run_id: str, record_rel: str) -> dict[str, Change]:
    """What a killed turn of `run_id` left uncommitted, as checkpoint changes: its pending
    history files (bytes), its workdir changes and session.json (DISK)."""
    journal.ensure_excludes(Path(git.repo.path))
    guarded.remove_temp_files(git.pending.dir, [HISTORY, RUNS])
    guarded.remove_temp_files(git.path, [WORKDIR])
    changes: dict[str, Change] = {}
    floor = layout.next_seq(git)  # every seq below it is given on the branch already
    taken: set[int] = set()
    head = git.head_commit().tree
    for rel in sorted(git.pending.paths()):
        data = git.pending.read(rel)
        if rel == record_rel or data is None:
            continue
        if rel in head and head[rel].id == pygit2.hash(data):
            git.pending.drop([rel])  # committed already; the dead process only left it
        elif rel.startswith(f"{HISTORY}/") and not _own_message(rel, data, run_id, floor,
                                                                 taken):
            _set_aside(git, rel)
        elif rel.startswith(f"{RUNS}/") and not _parses(data):
            _set_aside(git, rel)
        else:
            changes[rel] = data
    # A name git cannot hold (names.py) is taken too: the commit leaves it out and lists it.
    for _, path in porcelain(git.path, "session.json", WORKDIR):
        if guarded.is_temp(path.rsplit("/", 1)[-1]):
            continue
        if path == "session.json" or path.startswith(f"{WORKDIR}/"):
            changes[path] = DISK
    return changes


def _parses(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _own_message(rel: str, data: bytes, run_id: str, floor: int, taken: set[int]) -> bool:
    seq = seq_of(rel.rsplit("/", 1)[-1])
    try:
        msg = json.loads(data)
    except ValueError:
        return False
    if seq is None or seq < floor or seq in taken or not isinstance(msg, dict):
        return False
    if msg.get("run_id") not in (run_id, None):
        return False
    taken.add(seq)
    return True


def _set_aside(git: GitSession, rel: str) -> None:
    """Move a pending file recovery will not commit into .git/braid-set-aside/, so nothing
    is destroyed and no later commit takes it."""
    git.pending.set_aside(rel, Path(git.repo.path) / ASIDE)
    log.warning("set aside %s of session %s (not committed)", rel, git.path.name)
