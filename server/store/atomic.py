"""Checkout and a merge's file writes as journaled, guarded operations (DESIGN §4 "Atomic
operations"): every path is checked before the first write, written by the guarded writer,
and covered by an intent record, so a kill in the middle is finished or undone at start-up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pygit2

from server.base import crash
from server.base.fsops import sync_all
from server.git import lookup
from server.git.history import HISTORY, RUNS
from server.git.session import Change, GitSession
from server.git.trees import apply_changes, tree_delta
from server.git.workdir import guarded
from server.git.workdir.scan import WORKDIR
from server.git.workdir.staging import DISK
from server.store import journal


def changed_paths(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None,
                  prefix: str = "") -> tuple[list[str], list[str]]:
    """(paths written, paths deleted) to go from `old` to `new`, with `prefix` prepended."""
    written: list[str] = []
    deleted: list[str] = []
    for path, _, entry in tree_delta(old, new, prefix):  # the changed folders only
        (written if entry is not None else deleted).append(path)
    return written, deleted


def disk_paths(repo: pygit2.Repository, old: pygit2.Tree, new: pygit2.Tree
               ) -> tuple[list[str], list[str]]:
    """(written, deleted) on disk from `old` to `new`: every top-level entry but history/
    and runs/, which are never on disk (their index entries move with `sync_off_disk`)."""
    written: list[str] = []
    deleted: list[str] = []
    # An entry of a tree always has a name (pygit2 types it `str | None` for any object).
    names = sorted({n for t in (old, new) for e in t if (n := e.name) is not None}
                   - {HISTORY, RUNS})
    for name in names:
        a = old[name] if name in old else None
        b = new[name] if name in new else None
        if a is not None and b is not None and a.id == b.id and a.filemode == b.filemode:
            continue
        ta = a if isinstance(a, pygit2.Tree) else None
        tb = b if isinstance(b, pygit2.Tree) else None
        if ta is not None or tb is not None:
            w, d = changed_paths(repo, ta, tb, f"{name}/")
            written += w
            deleted += d
        if a is not None and ta is None and (b is None or tb is not None):
            deleted.append(name)  # a file gone, or replaced by a folder
        elif b is not None and tb is None:
            written.append(name)
    return written, deleted


def check_all(git: GitSession, written: list[str], deleted: list[str]) -> None:
    """Refuse (`UnsafePath`) before anything changes if any write would leave its folder."""
    for rel in written:
        guarded.check(git.path, rel, deleted)
    for rel in deleted:
        guarded.parts_of(rel)


def checkout(git: GitSession, name: str) -> None:
    """Switch the session to branch `name`: only the paths that differ are written (deletions
    first), then HEAD moves and those index entries follow."""
    ref = lookup.reference(git.repo, f"refs/heads/{name}")
    if ref is None:
        from server.base.errors import NotFound

        raise NotFound(f"no branch {name}")
    git.index.flush()
    old = git.head_commit().tree
    new = ref.peel(pygit2.Commit).tree
    written, deleted = disk_paths(git.repo, old, new)
    check_all(git, written, deleted)
    paths = written + deleted  # on disk; history/ and runs/ move in the index only
    record = journal.begin(git, "checkout", paths, to=name)
    try:
        journal.apply_tree(git, new, deleted)
        git.index.sync_off_disk(new)
        journal.apply_tree(git, new, written)
        git.index.flush()
        crash.at("checkout.after_files")
        sync_paths(git, written, deleted)  # the files before HEAD names their branch
        git.repo.set_head(f"refs/heads/{name}")
        crash.at("checkout.after_head")
    except BaseException:
        # Back to where it was: the old branch's files on the changed paths.
        git.repo.set_head(f"refs/heads/{record['branch']}")
        journal.apply_tree(git, old, paths)
        git.index.reset()
        journal.end(git)
        raise
    journal.end(git)


def sync_paths(git: GitSession, written: list[str], deleted: list[str]) -> None:
    """The files written and the folders changed, synced together (DESIGN "Durability"):
    after a power cut the working tree is the one HEAD names."""
    calls: list[Callable[[], None]] = [functools.partial(guarded.sync, git.path, rel)
                                       for rel in written]
    calls += [functools.partial(guarded.sync_folder, git.path, rel)
              for rel in sorted(guarded.folders_of(written + deleted))]
    sync_all(calls)


def merge_paths(git: GitSession, old_oid: pygit2.Oid, new_oid: pygit2.Oid
                ) -> tuple[list[str], list[str]]:
    """(written, deleted) repo-relative paths to bring workdir/ from tree `old_oid` to
    `new_oid`, refused (`UnsafePath`) before anything changes if a write would escape."""
    written, deleted = changed_paths(git.repo, lookup.tree_at(git.repo, old_oid),
                                     lookup.tree_at(git.repo, new_oid),
                                     f"{WORKDIR}/")
    check_all(git, written, deleted)
    return written, deleted


def write_workdir(git: GitSession, new_oid: pygit2.Oid, written: list[str],
                  deleted: list[str]) -> dict[str, Change]:
    """Write a merge's workdir paths (inside its intent); returns the checkpoint changes."""
    new_tree = _as_repo_tree(git, new_oid)
    journal.apply_tree(git, new_tree, deleted)
    journal.apply_tree(git, new_tree, written)
    changes: dict[str, Change] = {rel: None for rel in deleted}
    changes.update({rel: DISK for rel in written})
    return changes


def _as_repo_tree(git: GitSession, workdir_oid: pygit2.Oid) -> pygit2.Tree:
    """A tree holding `workdir_oid` at `workdir/`, so repo-relative paths resolve in it."""
    tree = apply_changes(git.repo, None, {WORKDIR: (workdir_oid, pygit2.enums.FileMode.TREE)})
    assert tree is not None  # it holds workdir/
    return tree
