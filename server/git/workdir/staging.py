"""What the index and the disk hold (DESIGN "The index and the disk"): two parts of
`GitSession`, `StagingIndex` (`git.index`: the index kept through the one writer,
index_file.py) and `Pending` (`git.pending`: what a live turn has not committed yet), which
keep `history/` and `runs/` off disk.

- Index entries are queued as checkpoints and checkouts write and flushed in one write
  (`StagingIndex.flush`); a git command run in the folder (`git update-index` after an import, the
  user's own) writes the file too, and the next look re-reads it (`GitIndex.refresh`).
- `history/` and `runs/` files live in git only: a checkpoint writes them as blobs, their
  index entries carry skip-worktree (`git status` is clean and `git ls-files -t` shows `S`),
  and a checkout moves only their index entries. What a live turn has not committed yet
  (its user message, its RUNNING record) is written to `.git/braid-pending/<path>` (the
  worktree's own git dir for a sub-agent), where recovery finds it after a kill; a commit
  that holds a pending file removes it.
- A session written before (its history on disk) is converted when opened (`convert`):
  files that match HEAD are dropped from disk, the others kept as pending.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pygit2

from server.git import lookup
from server.git.history import HISTORY, RUNS
from server.git.objects import TreeCache, folder_in
from server.git.workdir import guarded
from server.git.workdir.index_file import GitIndex
from server.git.workdir.index_format import (
    NO_STAT,
    SPARSE_EXTENSION,
    UNKNOWN,
    IndexFormatError,
    Unknown,
    clear_stale_lock,
    encode,
    tree_entries,
)

log = logging.getLogger("braid.index")
OFF_DISK = (f"{HISTORY}/", f"{RUNS}/")
PENDING = "braid-pending"
LISTED_MAX_ENTRIES = 1000
LISTED_MAX_TREES = 4096


def off_disk(rel: str) -> bool:
    return rel.startswith(OFF_DISK)


DISK = object()  # a change that takes the file as it is on disk now (git_session.Change)


class Staged(NamedTuple):
    """A queued index entry: the blob and mode committed, and the lstat of the file on disk
    that holds them (None: not on disk), taken at `taken`."""

    oid: pygit2.Oid
    mode: int
    st: os.stat_result | None = None
    taken: float = 0.0


def staged(oid: pygit2.Oid, mode: int, abs_path: Path | None) -> Staged:
    """`(oid, mode)` with the lstat of `abs_path`, the file that now holds them."""
    if abs_path is None:
        return Staged(oid, mode)
    taken = time.time()
    try:
        return Staged(oid, mode, os.lstat(abs_path), taken)
    except OSError:
        return Staged(oid, mode)


def porcelain(path: Path, *pathspec: str, untracked: bool = True) -> list[tuple[str, str]]:
    """`git status` of the session folder (or of `pathspec`) as (XY, path) pairs, by the git
    CLI: it honours skip-worktree (libgit2's status reports those entries deleted), and
    `--no-optional-locks` keeps it from rewriting the index."""
    args = ["git", "--no-optional-locks", "-c", "core.quotePath=false", "-C", str(path),
            "status", "--porcelain", "-z", "--no-renames",
            "--untracked-files=" + ("all" if untracked else "no")]
    done = subprocess.run([*args, "--", *pathspec] if pathspec else args,
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git status failed: {done.stderr.decode(errors='replace')}")
    out = []
    for item in done.stdout.split(b"\0"):
        if item:
            out.append((item[:2].decode(), item[3:].decode("utf-8", "surrogateescape")))
    return out


def is_sparse_file(index_file: Path) -> bool:
    """The index file ends with the `sdir` extension (this writer puts it last)."""
    try:
        with open(index_file, "rb") as f:
            f.seek(-28, os.SEEK_END)
            return f.read(8) == SPARSE_EXTENSION + b"\0\0\0\0"
    except OSError:  # missing, or shorter than that
        return False


def _tree_id(tree: pygit2.Tree | None, name: str) -> bytes | Unknown | None:
    """The raw id of `tree`'s folder `name` (None: none; UNKNOWN: a file stands there)."""
    sub = lookup.entry(tree, name)  # not `tree[name]`: it leaks `name` (git/lookup.py)
    if sub is None:
        return None
    return sub.id.raw if isinstance(sub, pygit2.Tree) else UNKNOWN


class StagingIndex:
    """The session's index, kept by the one writer (index_file.py): entries queued by
    checkpoints and checkouts, written in one flush; history/ and runs/ as sparse entries.
    `GitSession.index`."""

    def __init__(self, path: Path, repo: pygit2.Repository, trees: TreeCache) -> None:
        self.path = path
        self.repo = repo
        self.trees = trees  # the trees as checkpoints made them: not read back
        # Index entries not yet written: a turn's checkpoints queue theirs and the turn
        # writes them once at its end (or the next status scan or checkout does).
        self._queued: dict[str, Staged | None] = {}
        self._index: GitIndex | None = None
        # Encoded skip-worktree entries of history/ and runs/ subtrees, by (tree id, path):
        # a checkout re-lists only the folders it has not seen (small ones are kept).
        self._listed: dict[tuple[pygit2.Oid, str], list[tuple[bytes, bytes]]] = {}
        self._dirty = False
        # What the queued entries do to history/ and runs/: prefix -> (tree before, tree
        # after), or None when something else queued entries there (checked at the flush).
        self._pending_trees: dict[str, tuple[bytes | None, bytes | None] | None] = {}
        self._checked: tuple[int, int, pygit2.Oid] | None = None
        self._prime_libgit2()

    def _head_tree(self) -> pygit2.Tree:
        return self.repo.head.peel(pygit2.Commit).tree

    def _prime_libgit2(self) -> None:
        """libgit2 reads the index once per repository (attributes, for a blob made from a
        file) and keeps it, but cannot read a sparse one: it is given a full file first."""
        try:
            if is_sparse_file(self.file):  # written so by a process before this one
                # One killed while it rewrote the file left its lock too. Recovery clears
                # such locks, but only through an open session: this is where it opens.
                clear_stale_lock(self.file.with_name("index.lock"))
                self.load().write(full=True)
            self.repo.index  # noqa: B018 - loaded now, kept by libgit2 from here on
        except (pygit2.GitError, OSError, IndexFormatError) as e:
            log.warning("the index of %s is not readable by libgit2: %s", self.path, e)

    # -- the index ------------------------------------------------------------------------

    @property
    def file(self) -> Path:
        return Path(self.repo.path) / "index"

    def load(self) -> GitIndex:
        """The index in memory, re-read if a git command wrote the file since; rebuilt from
        HEAD if it holds what this writer does not keep."""
        try:
            if self._index is None:
                self._index = GitIndex(self.file, self.path, expand=self._expand)
            else:
                self._index.refresh()
        except IndexFormatError as e:
            log.warning("index of %s rebuilt from HEAD: %s", self.path, e)
            self._index = GitIndex(self.file, self.path, read=False,
                                   expand=self._expand)
            self._reset_from_head(self._index)
        return self._index

    def _expand(self, prefix: bytes, tree: bytes) -> list[tuple[bytes, bytes]]:
        """A sparse directory entry's files (the index file names the tree)."""
        obj = self.repo.get(pygit2.Oid(raw=tree))
        if not isinstance(obj, pygit2.Tree):
            raise IndexFormatError(f"the index names {prefix!r} as a tree it does not have")
        return self._list_off_disk(obj, prefix.decode("utf-8", "surrogateescape"))

    def queue(self, rel: str, entry: Staged | None) -> None:
        if off_disk(rel):  # not known as a tree's move: the flush checks the folder
            self._pending_trees[rel[:rel.index("/") + 1]] = None
        self._queued[rel] = entry

    def queue_commit(self, entries: dict[str, Staged | None], base: bytes | None,
                     tree: bytes) -> None:
        """Queue a commit's entries: `tree` is `base` with them applied;
        history/ and runs/ move from `base`'s folders to `tree`'s (one sparse entry each).
        The trees as the checkpoint made them (rawobjects.TreeCache): not read back."""
        self._queued.update(entries)
        old = self.trees.entries(base, copy=False) if base is not None else None
        new = self.trees.entries(tree, copy=False)
        for prefix in OFF_DISK:
            before = folder_in(old, prefix[:-1].encode(), UNKNOWN)
            after = folder_in(new, prefix[:-1].encode(), UNKNOWN)
            if before is UNKNOWN or after is UNKNOWN:
                self._pending_trees[prefix] = None
                continue
            chain = self._pending_trees.get(prefix, (before, before))
            if chain is None or chain[1] != before:
                self._pending_trees[prefix] = None
            else:
                self._pending_trees[prefix] = (chain[0], after)

    def flush(self) -> None:
        """Write the queued entries, so `git status` in the session folder tells the truth."""
        if not self._queued and not self._dirty:
            return
        entries, self._queued = self._queued, {}
        trees, self._pending_trees = self._pending_trees, {}
        self._dirty = False
        index = self.load()
        moves = {p: t for p, t in trees.items() if t is not None}
        index.update(((rel, None if e is None else (e.oid, e.mode, e.st, off_disk(rel),
                                                    e.taken)) for rel, e in entries.items()),
                     moves)
        if not self.repo.head_is_unborn:
            self._adopt(index, {p: t[1] for p, t in moves.items()})
        index.write()

    def _adopt(self, index: GitIndex, targets: dict[str, bytes | None]) -> None:
        """history/ and runs/ not known as a tree (the file was re-read, recovery moved
        entries): compared once with the tree the queued commits made (else HEAD's), so
        the next writes are sparse again; and after a git command wrote the file, the
        other entries compared with HEAD's."""
        head = None
        seen = (id(index), index.loads, lookup.ref_oid(self.repo.head))
        if not index.committed and self._checked != seen:
            self._checked = seen  # once per file read and HEAD, not per flush
            head = self._head_tree()
            want = {p: (oid.raw, mode) for p, oid, mode, _ in tree_entries(head)
                    if not off_disk(p)}
            index.committed = index.outside(OFF_DISK) == want
        for prefix in OFF_DISK:
            if index.tree_of(prefix) is not UNKNOWN:
                continue
            tree: bytes | Unknown | None
            if prefix in targets:
                tree = targets[prefix]
            else:
                head = head or self._head_tree()
                tree = _tree_id(head, prefix[:-1])
            if tree is None:
                index.adopt(prefix, None, [])
            elif tree is not UNKNOWN:
                sub = lookup.tree_at(self.repo, pygit2.Oid(raw=tree))
                index.adopt(prefix, tree, self._list_off_disk(sub, prefix))

    def sync_off_disk(self, tree: pygit2.Tree) -> None:
        """The history/ and runs/ entries of the index become `tree`'s (a checkout moves them
        in the index only); written by the next `flush`. Costs the folders not seen
        before, a splice of the sorted entries, and no file."""
        index = self.load()
        for name in (HISTORY, RUNS):
            sub = lookup.entry(tree, name)  # not `tree[name]`: it leaks `name`
            if isinstance(sub, pygit2.Tree):
                index.replace_prefix(f"{name}/", self._list_off_disk(sub, f"{name}/"),
                                     sub.id.raw)
            else:
                index.replace_prefix(f"{name}/", [], None if sub is None else UNKNOWN)
        self._dirty = True

    def _list_off_disk(self, tree: pygit2.Tree, prefix: str) -> list[tuple[bytes, bytes]]:
        cached = self._listed.get((tree.id, prefix))
        if cached is not None:
            return cached
        items: list[tuple[bytes, bytes]] = []
        for entry in tree:  # git's tree order is the index's order
            path = f"{prefix}{entry.name}"
            if isinstance(entry, pygit2.Tree):
                items += self._list_off_disk(entry, f"{path}/")
            else:
                key = path.encode("utf-8", "surrogateescape")
                items.append((key, encode(key, entry.id.raw, int(entry.filemode), NO_STAT,
                                          True)))
        if len(items) <= LISTED_MAX_ENTRIES:  # a leaf folder: kept, the big lists are not
            if len(self._listed) >= LISTED_MAX_TREES:
                self._listed.clear()
            self._listed[(tree.id, prefix)] = items
        return items

    def _reset_from_head(self, index: GitIndex) -> None:
        if self.repo.head_is_unborn:
            index.reset((), {p: None for p in OFF_DISK})
        else:
            tree = self._head_tree()
            known = {p: _tree_id(tree, p[:-1]) for p in OFF_DISK}
            index.reset(tree_entries(tree, "", OFF_DISK),
                        {p: t for p, t in known.items() if t is not UNKNOWN})
        index.committed = True

    def reset(self) -> None:
        """The index = HEAD's tree (entries whose blob is unchanged keep their stat data),
        for when a dead process may have left entries unwritten."""
        self._queued = {}
        self._pending_trees = {}
        index = self.load()
        self._reset_from_head(index)
        index.write()

class Pending:
    """What a live turn has not committed yet: `history/` and `runs/` files in
    `.git/braid-pending/` until their commit (recovery finds them after a kill).
    `GitSession.pending`."""

    def __init__(self, path: Path, repo: pygit2.Repository) -> None:
        self.path = path
        self.repo = repo
        self._paths: set[str] | None = None  # files in .git/braid-pending, once listed

    @property
    def dir(self) -> Path:
        return Path(self.repo.path) / PENDING

    def write(self, rel: str, data: bytes) -> None:
        """A file of a live turn before its commit: `history/` and `runs/` files into the
        pending folder, the others (session.json) into the working tree; atomic either way."""
        if not off_disk(rel):
            guarded.write(self.path, rel, data)
            return
        pending = self.paths()
        if not pending:
            self.dir.mkdir(exist_ok=True)
        guarded.write(self.dir, rel, data)
        pending.add(rel)

    def paths(self) -> set[str]:
        """The repo-relative paths of the pending files (listed from disk once)."""
        if self._paths is None:
            found: set[str] = set()
            base = self.dir
            if base.is_dir():
                for dirpath, _, names in os.walk(base):
                    rel_dir = Path(dirpath).relative_to(base).as_posix()
                    # A dot name is a temporary file (this writer's or an older one's).
                    found.update(f"{rel_dir}/{n}" for n in names if not n.startswith("."))
            self._paths = found
        return self._paths

    def read(self, rel: str) -> bytes | None:
        try:
            return (self.dir / rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def drop(self, rels: Iterable[str]) -> None:
        """Remove pending files (their content is committed now, or given up)."""
        pending = self.paths()
        if not pending:
            return
        for rel in rels:
            if rel in pending:
                pending.discard(rel)
                (self.dir / rel).unlink(missing_ok=True)

    def drop_committed(self) -> None:
        """Remove the pending files HEAD holds as they are (a kill after the commit that
        took them, before they were removed)."""
        pending = self.paths()
        if not pending or self.repo.head_is_unborn:
            return
        tree = self.repo.head.peel(pygit2.Commit).tree
        done = []
        for rel in pending:
            data = self.read(rel)
            entry = lookup.at_path(tree, rel)  # not `tree[rel]`: it leaks `rel`
            if data is None or (entry is not None and entry.id == pygit2.hash(data)):
                done.append(rel)
        self.drop(done)

    def set_aside(self, rel: str, aside: Path) -> None:
        """Move a pending file recovery will not commit to `aside/rel` (kept for a human)."""
        dest = aside / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        (self.dir / rel).replace(dest)
        self.paths().discard(rel)



# -- sessions written with history on disk --------------------------------------------------

def convert(pending: Pending, index: StagingIndex) -> None:
    """History on disk (a session written before, or an old sub-agent worktree): each
    file that matches HEAD is dropped from disk, any other is moved to the pending folder
    (recovery commits a killed run's), and the index entries get skip-worktree."""
    root, repo = pending.path, pending.repo
    folders = [name for name in (HISTORY, RUNS) if (root / name).is_dir()]
    if not folders or repo.head_is_unborn:
        return
    tree = repo.head.peel(pygit2.Commit).tree
    for name in folders:
        base = root / name
        if base.is_symlink():
            continue
        for dirpath, _, names in os.walk(base):
            for file in names:
                rel = (Path(dirpath) / file).relative_to(root).as_posix()
                _convert_file(pending, tree, rel)
        shutil.rmtree(base, ignore_errors=True)
    index.reset()
    log.info("history of %s moved off disk", root)


def _convert_file(pending: Pending, tree: pygit2.Tree, rel: str) -> None:
    path = pending.path / rel
    if guarded.is_temp(path.name) or path.is_symlink() or not path.is_file():
        return
    entry = lookup.at_path(tree, rel)  # not `tree[rel]`: it leaks `rel`
    if entry is None or entry.id != pygit2.hashfile(str(path)):
        dest = pending.dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        path.replace(dest)
        pending.paths().add(rel)
