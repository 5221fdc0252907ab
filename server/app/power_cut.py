"""Start-up after a power cut (DESIGN "Durability").

A process that stops cleanly removes its marker (`.running/<pid>-<nonce>` in the data dir);
one found at start-up, with no other process alive, says the last stop was a kill or a power
cut. Then, before anything else is recovered, each session is checked for what a cut can
leave behind (what Braid syncs today never leaves it; an older Braid, a disk that lied, or
another program's writes may): a ref at a commit whose objects are not all there is moved
back along its reflog to the newest commit that is whole (a ref with none goes, unless HEAD
is on it), and an index file that does not check out is removed (it is rebuilt from HEAD).
Runs whose records were rolled back are then found by the usual recovery (INTERRUPTED, or
forgotten when nothing of them is on disk: `agent.interrupted.interrupt_run`).

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

from server.base.fsops import sync_dir
from server.git.session import GitSession

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.power_cut")
MARKERS = ".running"
DEPTH = 50  # commits behind each tip checked: a cut loses only the last seconds' writes


def mark_running(data_dir: Path) -> tuple[Path, bool]:
    """This process's marker (made and synced now), and whether others were left behind."""
    folder = data_dir / MARKERS
    folder.mkdir(exist_ok=True)
    left = any(folder.iterdir())
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


async def check_sessions(braid: Services) -> None:
    """Every session: a torn index file removed, refs at missing objects rolled back."""
    for session_id in braid.store.all_ids():
        path = braid.store.path(session_id)
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
            str(repo.references["HEAD"].target)
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
    return done


def _log(ref: pygit2.Reference) -> list[pygit2.RefLogEntry]:
    try:
        return list(ref.log())
    except (pygit2.GitError, KeyError):
        return []


def whole(repo: pygit2.Repository, oid: pygit2.Oid, seen: set[pygit2.Oid]) -> bool:
    """Whether commit `oid` and the `DEPTH` commits behind it are all there (see above)."""
    todo = [(oid, 0)]
    commits: set[pygit2.Oid] = set()
    while todo:
        at, depth = todo.pop()
        if at in commits:
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
