"""User edits and shell changes in `workdir/`, found in O(changed files) (DESIGN "User edits").

The session's watcher (watch.py) names the candidate paths; each is compared with HEAD by
hashing it. The first look, and any look the watcher cannot answer, scans everything with
one `git status -- workdir` instead (the index's stat cache makes an unchanged file cost an
lstat; a new file is listed, not hashed). Many changed files at once (a folder dropped in,
the first snapshot of a big project) are committed with their blobs in one pack file
(`WorkdirScan.pack`): git's `add -A` would write, compress and rename a loose object each.
`WorkdirScan` is the part of `GitSession` that does it (`git.scan`).
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import FileMode

from server.base import names
from server.git import lookup
from server.git.packwriter import PackWriter
from server.git.trees import walk
from server.git.workdir import guarded
from server.git.workdir.staging import DISK, Staged, StagingIndex, off_disk, porcelain
from server.git.workdir.watch import WATCHERS, Watcher

WORKDIR = "workdir"  # the agent's files (DESIGN §3)


def workdir_tree(commit: pygit2.Commit | None) -> pygit2.Tree | None:
    """The `workdir/` folder of `commit`, or None."""
    return lookup.subtree(commit.tree, WORKDIR) if commit is not None else None


def holdable(changes: Mapping[str, Any], root: Path
             ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the changes git can hold, [(path, why not)] for the others). A name found on disk
    (DISK, a blob packed from it, a deletion) is left out, and so is a symlink named
    `.gitmodules` (`git fsck` refuses one); bytes Braid was handed to write under a bad name
    are refused (`BadName`) before anything is written: its door missed it."""
    kept: dict[str, Any] = {}
    left: list[tuple[str, str]] = []
    for rel, content in changes.items():
        if off_disk(rel):
            reason = None
        elif content is None or isinstance(content, bytes):
            reason = names.why_not(rel)
        else:
            reason = why_left_out(root, rel, content)
        if reason is None:
            kept[rel] = content
        elif isinstance(content, bytes):
            raise names.BadName(rel, reason)
        else:
            left.append((rel, reason))
    return kept, left


def why_left_out(root: Path, rel: str, content: Any = DISK) -> str | None:
    """Why the file at `rel` (under `root`) cannot be committed as it is, or None."""
    if rel.endswith("/"):  # how `git status` lists a nested repository: never entered
        return "a nested git repository"
    reason = names.why_not(rel)
    if reason is None and names.why_not(rel, symlink=True):  # a `.gitmodules` spelling
        link = content.mode == FileMode.LINK if isinstance(content, Staged) \
            else os.path.islink(root / rel)
        reason = names.why_not(rel, symlink=True) if link else None
    return reason


class WorkdirScan:
    """What changed in `workdir/` since HEAD, and its files packed for a commit: the part
    of `GitSession` that holds the watcher (`git.scan`)."""

    def __init__(self, path: Path, repo: pygit2.Repository, index: StagingIndex,
                 watch: bool) -> None:
        self.path = path
        self.repo = repo
        self.index = index  # flushed before `git status` reads it
        # A file-system watcher on workdir/ (watch.py), opened by the first look.
        self._watch = watch
        self._watcher: Watcher | None = None
        # Paths the last look found changed: looked at again until they match HEAD.
        self._carry: set[str] = set()
        # Names git cannot hold that a commit listed as left out, with their lstat then: a
        # look names one again only once it changed, so each is listed once, not every turn.
        self._listed_bad: dict[str, tuple[int, ...] | None] = {}

    def dirty_paths(self) -> list[str]:
        """Repo-relative paths under workdir/ that differ from HEAD (user edits, shell
        commands). Uses the index's stat cache, so unchanged files are not read."""
        self.index.flush()
        return sorted({p for _, p in porcelain(self.path, WORKDIR) if p.startswith(f"{WORKDIR}/")})

    def changed_paths(self) -> list[str]:
        """`dirty_paths()` in O(changed files): the watcher names the candidates and
        each is compared with HEAD. The first look, and any look the watcher cannot answer,
        scans everything instead."""
        if not self._watch:
            return self.dirty_paths()
        watcher = self._watcher
        candidates = watcher.take() if watcher is not None else None
        if candidates is None:
            if watcher is not None:
                WATCHERS.forget(watcher)
            # Opened before the scan: a change made during it is seen by the next look.
            self._watcher = WATCHERS.open(self.path / WORKDIR, Path(self.repo.path))
            found = self.dirty_paths()  # a full scan: one `git status`
        else:
            assert watcher is not None  # the candidates came from it
            WATCHERS.touch(watcher)
            found = self._differing(candidates | self._carry)
        if self._listed_bad:
            found = [p for p in found if not self._listed_as_is(p)]
        self._carry = {p[len(WORKDIR) + 1:] for p in found}
        return found

    def note_listed(self, rels: Iterable[str]) -> None:
        """`rels` (names git cannot hold) were listed as left out by a commit."""
        for rel in rels:
            self._listed_bad[rel] = self._signature(rel)

    def _listed_as_is(self, rel: str) -> bool:
        return rel in self._listed_bad and self._listed_bad[rel] == self._signature(rel)

    def _signature(self, rel: str) -> tuple[int, ...] | None:
        try:
            st = os.lstat(self.path / rel)
        except OSError:
            return None
        return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _differing(self, candidates: Iterable[str]) -> list[str]:
        head = workdir_tree(self.repo.head.peel(pygit2.Commit))
        work = self.path / WORKDIR
        out: set[str] = set()
        todo = list(candidates)
        seen: set[str] = set()
        while todo:
            rel = todo.pop()
            if rel in seen or not rel:
                continue
            seen.add(rel)
            # A name git cannot hold is in no tree. Not `head[rel]`: it leaks `rel`.
            entry = lookup.at_path(head, rel) if names.is_utf8(rel) else None
            if isinstance(entry, pygit2.Tree):  # a folder in HEAD: look at what it held
                todo.extend(path for path, _ in walk(entry, f"{rel}/"))
                entry = None
            try:
                st = os.lstat(work / rel)
            except (FileNotFoundError, NotADirectoryError):
                if entry is not None:
                    out.add(rel)
                continue
            if stat.S_ISDIR(st.st_mode):  # a new folder may hold files made before its watch
                for dirpath, _, files_here in os.walk(work / rel):
                    base = os.path.relpath(dirpath, work)
                    todo.extend(f"{base}/{n}" for n in files_here)
                if entry is not None:
                    out.add(rel)  # a file replaced by a folder
                continue
            if self._file_differs(work / rel, st, entry, rel):
                out.add(rel)
        return sorted(f"{WORKDIR}/{rel}" for rel in out)

    def _file_differs(self, path: Path, st: os.stat_result, entry: pygit2.Object | None,
                      rel: str) -> bool:
        if not (stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return False
        if entry is None:  # new: unless git ignores it
            return not self._ignored(f"{WORKDIR}/{rel}")
        if stat.S_ISLNK(st.st_mode):
            oid = pygit2.hash(os.fsencode(os.readlink(path)))
            mode = FileMode.LINK
        else:
            oid = pygit2.hashfile(str(path))
            mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
        return entry.id != oid or entry.filemode != mode

    def _ignored(self, rel: str) -> bool:
        if names.is_utf8(rel):
            return bool(self.repo.path_is_ignored(rel))
        # libgit2 takes no other name: git itself answers (rare: a shell's odd name).
        done = subprocess.run(["git", "-C", str(self.path), "check-ignore", "-q", "--no-index",
                               "--", rel], capture_output=True, check=False)
        return done.returncode == 0

    def pack(self, paths: list[str]) -> dict[str, object]:
        """The changes that commit `paths` (repo-relative, under workdir/) as they are on
        disk, their blobs written as one pack: a first snapshot of 100,000 files is one
        file write for its blobs (and a loose tree per folder), where `git add -A` creates
        100,000 files. The pack is in place on return: trees written next may name them."""
        changes: dict[str, object] = {}
        with PackWriter(self.repo) as pack:
            safe: dict[str, bool] = {}  # a parent folder -> no symlink or file on its way
            for rel in paths:
                parent = rel.rpartition("/")[0]
                if parent not in safe:
                    safe[parent] = not guarded.left_out(self.path, f"{parent}/x")
                if not safe[parent] or guarded.is_temp(rel.rpartition("/")[2]):
                    continue
                if names.why_not(rel) is not None:  # left out and listed by the checkpoint
                    changes[rel] = DISK
                    continue
                packed = self._packed(pack, rel)
                changes[rel] = packed if packed is not None else DISK  # gone, or not a file
        self._carry = set()
        return changes

    def _packed(self, pack: PackWriter, rel: str) -> Staged | None:
        """The file at `rel` as a blob in `pack`, with its stat taken before it is read (a
        later change shows as a stat mismatch); None when it is gone or not a file."""
        full = f"{self.path}/{rel}"
        taken = time.time()
        try:  # one open, fstat and read: a symlink is not followed (ELOOP)
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ELOOP:
                return None  # gone, or unreadable: the one-file path (DISK) judges it
            st = os.lstat(full)
            return Staged(pack.add(os.fsencode(os.readlink(full))), FileMode.LINK, st, taken)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            chunks = [os.read(fd, st.st_size or 1 << 16)]
            while chunks[-1]:  # to the end: a short read, or a file still growing
                chunks.append(os.read(fd, 1 << 20))
            data = b"".join(chunks)
        finally:
            os.close(fd)
        mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
        return Staged(pack.add(data), mode, st, taken)

    def close(self) -> None:
        """Close the watcher (the session is let go)."""
        if self._watcher is not None:
            WATCHERS.forget(self._watcher)
            self._watcher = None
