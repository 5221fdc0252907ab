"""The intent journal: what makes each multi-step operation all-or-nothing under kill -9
(DESIGN §4 "Atomic operations").

Before its first file changes, an operation (revert, unrevert, merge, checkout, a sub-agent's
result, recovery) writes one small record, `.git/braid-intent.json`: the operation, the
commit kind it ends with, the branch and its tip before, and every repo-relative path it may
write. The record is removed once the operation's commit is made and the index agrees. At
start-up (`recover`) a record left behind means the process died in between:

- the branch moved past the recorded tip: the commit was made, so the operation is finished
  (its paths brought in line with the new tip, the index entries too);
- otherwise nothing was committed: every recorded path is put back as the tip has it (a file
  the operation created is deleted), so the working tree is as before the operation;
- a checkout is rolled forward (the target branch is recorded; its files are written again).

The same rollback runs at once when an operation raises half-way. All writes go through the
guarded writer. Creating a session folder (a fork) uses a marker next to it instead
(`sessions/.<id>.intent`): a folder whose marker is still there at start-up is half-made and
is removed, unless its fork commit was made, when only the marker goes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Unpack, cast

import pygit2
from pygit2.enums import FileMode

from server.base import crash
from server.base.fsops import sync_dir
from server.base.ids import is_session_id
from server.base.records import IntentExtras, IntentRecord
from server.git import lookup
from server.git.commits import commit_info
from server.git.session import GitSession
from server.git.trees import files_at
from server.git.workdir import guarded
from server.git.workdir.staging import Staged, off_disk, porcelain, staged

log = logging.getLogger("braid.journal")
INTENT = "braid-intent.json"
FOLDER_INTENT = ".{}.intent"
EXCLUDES = ("/_worktrees/", guarded.TEMP_GLOB)


def intent_path(git: GitSession) -> Path:
    return Path(git.repo.path) / INTENT


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)  # the record must be on disk before the first file it guards changes
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(path.parent)  # and its name


def begin(git: GitSession, op: str, paths: Iterable[str], *, kind: str | None = None,
          **extra: Unpack[IntentExtras]) -> IntentRecord:
    head = None if git.repo.head_is_unborn else str(git.head_oid())
    record: IntentRecord = {"op": op, "kind": kind or op, "branch": git.branch, "head": head,
              "paths": sorted(set(paths)), **extra}
    _write_atomic(intent_path(git), json.dumps(record).encode())
    return record


def end(git: GitSession) -> None:
    intent_path(git).unlink(missing_ok=True)


def load(git: GitSession) -> IntentRecord | None:
    try:
        return cast(IntentRecord, dict(json.loads(intent_path(git).read_bytes())))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        log.warning("unreadable intent record in %s: removed", git.path)
        end(git)  # written atomically, so only a foreign file can be unreadable
        return None


@contextlib.contextmanager
def intent(git: GitSession, op: str, paths: Iterable[str], *, kind: str | None = None,
           **extra: Unpack[IntentExtras]) -> Iterator[IntentRecord]:
    """Hold an intent record around an operation; an exception rolls its files back."""
    record = begin(git, op, paths, kind=kind, **extra)
    try:
        yield record
    except BaseException:
        try:
            settle(git, record)
        finally:
            end(git)
        raise
    end(git)


# -- putting paths in line with a tree ------------------------------------------------------


def apply_tree(git: GitSession, tree: pygit2.Tree | None, paths: Iterable[str],
               strict: bool = True) -> None:
    """Make each repo-relative path on disk be what `tree` holds (absent: deleted), through
    the guarded writer, and the index entries of those paths with it. Not `strict`
    (recovery): a path the writer refuses (a folder swapped for a symlink since) is skipped
    and left for the next user-edit snapshot, rather than stopping the start."""
    git.index.flush()
    wanted = files_at(tree, paths)
    for rel in [r for r in wanted if off_disk(r)]:  # in the index only, never on disk
        entry = wanted.pop(rel)
        git.index.queue(rel, Staged(*entry) if entry is not None else None)
    refused: set[str] = set()
    unwritten: set[str] = set()  # already right on disk, maybe seen through a symlink
    # Deletions first, so a file can replace a folder that empties (and the other way).
    for rel in sorted(wanted, key=lambda r: wanted[r] is not None):
        entry = wanted[rel]
        try:
            if entry is None:
                guarded.delete(git.path, rel, prune_below=rel.split("/")[0])
            elif _on_disk_is(git, rel, entry):
                unwritten.add(rel)
            else:
                guarded.write(git.path, rel, lookup.blob_data(git.repo, entry[0]),
                              executable=entry[1] == FileMode.BLOB_EXECUTABLE,
                              symlink=entry[1] == FileMode.LINK)
        except guarded.UnsafePath:
            if strict:
                raise
            log.warning("recovery left %s alone: the writer refused it", rel)
            refused.add(rel)
    parents = {str(Path(rel).parent) for rel in wanted}
    guarded.remove_temp_files(git.path, [p for p in parents if p != "."])
    for rel, entry in wanted.items():
        if rel in refused:
            continue  # left as it is on disk: the next user-edit snapshot looks at it
        if entry is None:
            git.index.queue(rel, None)
        elif rel not in unwritten or not guarded.left_out(git.path, rel):
            git.index.queue(rel, staged(entry[0], entry[1], git.path / rel))
    git.index.flush()


def _on_disk_is(git: GitSession, rel: str, entry: tuple[pygit2.Oid, int]) -> bool:
    path = git.path / rel
    try:
        if entry[1] == FileMode.LINK:
            return path.is_symlink() and \
                os.fsencode(os.readlink(path)) == lookup.blob_data(git.repo, entry[0])
        if path.is_symlink() or not path.is_file():
            return False
        return pygit2.hash(path.read_bytes()) == entry[0] and \
            bool(path.stat().st_mode & 0o100) == (entry[1] == FileMode.BLOB_EXECUTABLE)
    except (OSError, ValueError):
        return False


def finish_checkout(git: GitSession, record: IntentRecord) -> None:
    """Roll an interrupted checkout forward: the target branch's files, then HEAD."""
    name = str(record.get("to"))
    ref = lookup.reference(git.repo, f"refs/heads/{name}")
    if ref is None:  # the target vanished: go back instead
        name = str(record.get("branch"))
        ref = lookup.reference(git.repo, f"refs/heads/{name}")
        if ref is None:
            raise KeyError(f"refs/heads/{name}")
    tree = ref.peel(pygit2.Commit).tree
    paths = [str(p) for p in record.get("paths") or ()]
    there = files_at(tree, paths)
    apply_tree(git, tree, [p for p in paths if there[p] is None],
                       strict=False)
    apply_tree(git, tree, [p for p in paths if there[p] is not None],
                       strict=False)
    git.repo.set_head(f"refs/heads/{name}")
    git.index.reset()  # the history entries follow the new HEAD


def settle(git: GitSession, record: IntentRecord) -> str:
    """Finish or roll back the operation `record` describes. Returns what was done."""
    branch = str(record.get("branch") or "main")
    paths = [str(p) for p in record.get("paths") or ()]
    if record.get("op") == "checkout":
        finish_checkout(git, record)
        return "completed"
    ref = lookup.reference(git.repo, f"refs/heads/{branch}")
    tip = lookup.ref_oid(ref) if ref is not None else None
    done = tip is not None and str(tip) != record.get("head")
    if done and tip is not None:
        info = commit_info(lookup.commit_at(git.repo, tip))
        if info.kind != record.get("kind"):
            log.warning("intent %s: the branch moved to a %s commit", record.get("op"),
                        info.kind)
    target = git.repo[tip].peel(pygit2.Commit).tree if tip is not None else None
    if git.branch == branch:
        apply_tree(git, target, paths, strict=False)
        if not done:
            _remove_untracked(git, [str(p) for p in record.get("untracked") or ()])
    # Entries a checkpoint wrote before a commit that never came (or the other way round),
    # and pending files the commit took.
    git.index.reset()
    git.pending.drop_committed()
    crash.at("recovery.after_rollback")
    return "completed" if done else "rolled back"


def _remove_untracked(git: GitSession, folders: list[str]) -> None:
    # The operation's own new files there (a merge turn's message and record, pending as a
    # live turn's are: staging.py): nothing else writes there while it holds the branch.
    if not folders:
        return
    prefixes = tuple(f"{f}/" for f in folders)
    git.pending.drop([rel for rel in git.pending.paths() if rel.startswith(prefixes)])


def recover(git: GitSession) -> str | None:
    """At start-up: settle an operation the last process left half-done."""
    record = load(git)
    if record is None:
        return None
    outcome = settle(git, record)
    end(git)
    log.warning("%s in %s: %s", record.get("op"), git.path.name, outcome)
    return outcome


def ensure_excludes(git_dir: Path) -> None:
    """Sessions made before temporary names were excluded get the pattern added (`git_dir`:
    the repository's `.git`)."""
    path = git_dir / "info" / "exclude"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    missing = [p for p in EXCLUDES if p not in lines]
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, ("\n".join(lines + missing) + "\n").encode())


# -- session folders (fork) -------------------------------------------------------------------


def folder_intent(root: Path, session_id: str) -> Path:
    return root / FOLDER_INTENT.format(session_id)


def begin_folder(root: Path, session_id: str, op: str) -> None:
    _write_atomic(folder_intent(root, session_id), json.dumps({"op": op}).encode())


def end_folder(root: Path, session_id: str) -> None:
    folder_intent(root, session_id).unlink(missing_ok=True)


def recover_folders(root: Path) -> tuple[list[str], list[str]]:
    """Remove half-made session folders; returns the ids of the folders that were finished
    (their fork commit exists) and so are kept, and of those removed (their index rows go
    too: a fork writes them while its folder is synced)."""
    kept: list[str] = []
    removed: list[str] = []
    for marker in root.glob(FOLDER_INTENT.format("*")):
        session_id = marker.name[1:-len(".intent")]
        folder = root / session_id
        if _is_finished(folder):
            kept.append(session_id)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(session_id)
            log.warning("removed the half-made session folder %s", session_id)
        marker.unlink(missing_ok=True)
    for folder in root.iterdir():
        # Left by a server that wrote no marker yet: a session folder that never got its
        # first commit (or its fork's checkout) is no session.
        if is_session_id(folder.name) and not (folder / "session.json").exists() \
                and _never_finished(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
            log.warning("removed the half-made session folder %s", folder.name)
    return kept, removed


def _never_finished(folder: Path) -> bool:
    try:
        repo = pygit2.Repository(str(folder))
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return not any(folder.iterdir()) or (folder / ".git").is_dir()
    if repo.head_is_unborn:
        return True
    return commit_info(repo.head.peel(pygit2.Commit)).kind == "fork"


def _is_finished(folder: Path) -> bool:
    """A fork or an import that made its commit, session.json and index (status clean)."""
    if not (folder / "session.json").is_file():
        return False
    try:
        git = GitSession(folder)
        return commit_info(git.head_commit()).kind in ("fork", "import") and \
            not porcelain(folder, untracked=False)
    except (pygit2.GitError, KeyError, ValueError, OSError, RuntimeError):
        return False
