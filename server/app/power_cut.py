"""Start-up after a power cut (DESIGN "Durability").

A process that stops cleanly removes its marker (`.running/<pid>-<nonce>` in the data dir);
one found at start-up, with no other process alive, says the last stop was a kill or a power
cut. Then, before anything else is recovered, each session is checked for what a cut can
leave behind (what Braid syncs today never leaves it; an older Braid, a disk that lied, or
another program's writes may): a ref at a commit whose objects are not all there is moved
back along its reflog to the newest commit that is whole (a ref with none goes, unless HEAD
is on it), every reflog is made whole (`repair_reflogs`: reflogs are not synced), and an
index file that does not check out is removed (it is rebuilt from HEAD).
Only the sessions written since the dead process started are looked at (`written_since`).
After the intents are settled, each of them has its index brought in line with git
(`reconcile`: a run committed but never indexed, as a kill between the two leaves, is
indexed; a finished run git no longer has is forgotten); runs left RUNNING are then
committed INTERRUPTED by the usual recovery (or forgotten when nothing of them is on disk:
`agent.interrupted.interrupt_run`).

A commit is whole when it, the first `DEPTH` commits behind it and all their trees can be
read and every blob they name exists (blobs are not read: the objects Braid writes are
synced before their name, so a name never holds a torn object).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from server.app.reindex import read_session
from server.base.fsops import sync_dir
from server.git.session import GitSession

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.power_cut")
MARKERS = ".running"
DEPTH = 50  # commits behind each tip checked: a cut loses only the last seconds' writes


def mark_running(data_dir: Path) -> tuple[Path, float | None]:
    """This process's marker (made and synced now), and when the oldest process that left
    one behind started (None: none did)."""
    folder = data_dir / MARKERS
    folder.mkdir(exist_ok=True)
    left = min((m.stat().st_mtime for m in folder.iterdir()), default=None)
    mine = folder / f"{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_dir(folder)
    sync_dir(data_dir)
    return mine, left


def clear_markers(data_dir: Path, keep: Path) -> None:
    """The markers dead processes left (once their sessions are checked)."""
    for marker in (data_dir / MARKERS).iterdir():
        if marker != keep:
            marker.unlink(missing_ok=True)


async def check_sessions(braid: Services, since: float) -> list[str]:
    """Every session written since `since` (when the dead process started): a torn index
    file removed, refs at missing objects rolled back. Returns those sessions."""
    touched = []
    for session_id in braid.store.all_ids():
        path = braid.store.path(session_id)
        if not written_since(path / ".git", since):
            continue
        touched.append(session_id)
        if drop_torn_index(path / ".git" / "index"):
            log.warning("session %s: its index file was torn (a power cut); rebuilt",
                        session_id)
        try:
            fixed = await braid.store.get(session_id).call(repair_refs)
        except Exception:  # noqa: BLE001 - one broken session must not stop the server
            log.exception("could not check the refs of session %s", session_id)
            continue
        for line in fixed:
            log.warning("session %s: %s", session_id, line)
    return touched


def written_since(git_dir: Path, since: float) -> bool:
    """Whether a commit, a checkout or a live turn wrote in `git_dir` since `since`: its
    index, HEAD's log and each branch's log are written by every one of them. The refs and
    their folders too: those are synced, while a cut can take the others' newer times back."""
    paths = [git_dir / "index", git_dir / "logs" / "HEAD", git_dir / "braid-pending",
             git_dir / "packed-refs"]
    for top, _, names in (*os.walk(git_dir / "logs" / "refs"), *os.walk(git_dir / "refs")):
        paths += [Path(top), *(Path(top) / n for n in names)]
    for path in paths:
        try:
            if path.stat().st_mtime >= since - 1:  # a second's slack for coarse clocks
                return True
        except FileNotFoundError:
            continue
    return False


async def reconcile(braid: Services, session_id: str) -> None:
    """The index brought in line with git for one session: every run record git holds
    indexed as git has it (a kill between a commit and its index write left it out), and
    a finished run the index holds but git does not (rolled back by a cut) forgotten. A
    RUNNING one is left to the usual recovery (INTERRUPTED, or forgotten)."""
    handle = braid.store.get(session_id)
    meta, runs = await handle.call(read_session)
    await braid.index.upsert_session(meta)
    known = {r["run_id"] for r in runs}
    for run in runs:
        await braid.index.upsert_run(session_id, run)
    for row in await braid.index.list_runs(session_id):
        if row["run_id"] not in known and row["status"] != "RUNNING":
            log.warning("run %s of session %s is not in git (a power cut): forgotten",
                        row["run_id"], session_id)
            await braid.index.delete_run(session_id, row["run_id"])


def drop_torn_index(index: Path) -> bool:
    """Remove an index file whose checksum does not match (True when removed)."""
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        return False
    if len(data) >= 32 and data[:4] == b"DIRC" and \
            hashlib.sha1(data[:-20]).digest() == data[-20:]:
        return False
    index.unlink()
    return True


def repair_refs(git: GitSession) -> list[str]:
    """Move each broken ref back to its newest whole commit (see the module's docstring);
    what was done, as sentences."""
    repo = git.repo
    seen: set[pygit2.Oid] = set()  # trees known whole
    try:  # the branch HEAD is on (its tip may be the missing object)
        head_branch = None if repo.head_is_detached else \
            repo.head.name  # resolving HEAD reads refs only, never the (missing) commit
    except (KeyError, pygit2.GitError):
        head_branch = None
    done: list[str] = []
    for ref in list(repo.references.iterator()):
        name = ref.name
        if not name.startswith(("refs/heads/", "refs/braid/")) or \
                not isinstance(ref.target, pygit2.Oid):
            continue
        if whole(repo, ref.target, seen):
            continue
        back = next((e.oid_new for e in _log(ref) if whole(repo, e.oid_new, seen)), None)
        if back is not None:
            ref.set_target(back, "braid: back to the last whole commit after a power cut")
            done.append(f"{name} was at a missing object: moved back to {back}")
        elif name != head_branch:
            ref.delete()
            done.append(f"{name} was at a missing object, none before it whole: removed")
        else:
            done.append(f"{name} (HEAD) is at a missing object and none before it is whole")
    done += repair_reflogs(git, seen)
    return done


def repair_reflogs(git: GitSession, seen: set[pygit2.Oid]) -> list[str]:
    """Every reflog made whole again: reflogs are not synced, so a cut can bring back a
    deleted branch's log (its ref's removal was synced, its log's was not) or keep a line
    naming a commit a cut took, or one whose tree it took; `git fsck` reads every log. A
    branch's log whose branch is gone is removed; elsewhere the lines naming a commit that is
    not whole go."""
    repo = git.repo
    done: list[str] = []
    logs = [git.common / "logs"] + [p / "logs" for p in (git.common / "worktrees").glob("*")]
    for top in logs:
        for folder, _, names in os.walk(top):
            for name in names:
                path = Path(folder) / name
                ref = path.relative_to(top).as_posix()
                if ref.startswith("refs/") and ref not in repo.references:
                    path.unlink()
                    sync_dir(path.parent)
                    done.append(f"the log of {ref} was left after its branch went: removed")
                elif prune_reflog(repo, path, seen):
                    done.append(f"the log of {ref} named commits a cut took: pruned")
    return done


def prune_reflog(repo: pygit2.Repository, path: Path, seen: set[pygit2.Oid]) -> bool:
    """Drop the reflog lines naming a commit that is not whole (`git fsck` reports them);
    True when some went."""
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return False
    zero = b"0" * 40
    kept = [line for line in lines
            if all(oid == zero or _whole_hex(repo, oid, seen)
                   for oid in line.split(b" ", 2)[:2] if len(oid) == 40)]
    if len(kept) == len(lines):
        return False
    tmp = path.with_name(path.name + ".braid-new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, b"".join(kept))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(path.parent)
    return True


def _whole_hex(repo: pygit2.Repository, oid: bytes, seen: set[pygit2.Oid]) -> bool:
    try:
        return whole(repo, pygit2.Oid(hex=oid.decode()), seen)
    except ValueError:  # not an id: a torn line, dropped
        return False


def _log(ref: pygit2.Reference) -> list[pygit2.RefLogEntry]:
    try:
        return list(ref.log())
    except (pygit2.GitError, KeyError):
        return []


def whole(repo: pygit2.Repository, oid: pygit2.Oid, seen: set[pygit2.Oid]) -> bool:
    """Whether commit `oid` and the `DEPTH` commits behind it are all there (see above).
    `seen`: trees and commits found whole (a commit once found is not walked again: every
    reflog line of a long session would walk the same 50 commits)."""
    todo = [(oid, 0)]
    commits: set[pygit2.Oid] = set()
    while todo:
        at, depth = todo.pop()
        if at in commits or at in seen:
            continue
        commits.add(at)
        try:
            obj = repo[at]
            if obj.type != pygit2.enums.ObjectType.COMMIT:
                return False
            commit = obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            return False
        if not _tree_whole(repo, commit.tree_id, seen):
            return False
        if depth < DEPTH:
            todo += [(p, depth + 1) for p in commit.parent_ids]
    seen.update(commits)
    return True


def _tree_whole(repo: pygit2.Repository, oid: pygit2.Oid, seen: set[pygit2.Oid]) -> bool:
    if oid in seen:
        return True
    try:
        obj = repo[oid]
        if obj.type != pygit2.enums.ObjectType.TREE:
            return False
        tree = obj.peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError):
        return False
    for entry in tree:
        if entry.filemode == pygit2.enums.FileMode.TREE:
            if not _tree_whole(repo, entry.id, seen):
                return False
        elif entry.filemode != pygit2.enums.FileMode.COMMIT and entry.id not in repo:
            return False
    seen.add(oid)
    return True
