"""User edits and shell changes in `workdir/`, found in O(changed files) (DESIGN "User edits").

The session's watcher (watch.py) names the candidate paths; each is compared with HEAD by
hashing it. The first look, and any look the watcher cannot answer, scans everything with
one `git add -A -- workdir` instead (the index's stat cache makes an unchanged file cost an
lstat). `WorkdirScan` is the part of `GitSession` that does it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import FileMode

from .staging import porcelain
from .watch import WATCHERS, Watcher

if TYPE_CHECKING:
    from collections.abc import Callable

WORKDIR = "workdir"  # the agent's files (DESIGN §3)


def walk_tree(tree: pygit2.Tree, prefix: str, out: dict[str, pygit2.Oid]) -> None:
    """Every file of `tree` as `prefix + path` → blob id, into `out`."""
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            walk_tree(entry, f"{prefix}{entry.name}/", out)
        else:
            out[f"{prefix}{entry.name}"] = entry.id


class WorkdirScan:
    path: Path
    repo: pygit2.Repository
    flush_index: Callable[..., None]
    head_commit: Callable[[], pygit2.Commit]
    subtree: Callable[[pygit2.Tree, str], pygit2.Tree | None]
    write_checkpoint: Callable[..., pygit2.Oid]

    def init_scan(self, watch: bool) -> None:
        # A file-system watcher on workdir/ (watch.py), opened by the first look.
        self._watch = watch
        self._watcher: Watcher | None = None
        # Paths the last look found changed: looked at again until they match HEAD.
        self._carry: set[str] = set()

    def dirty_workdir_paths(self) -> list[str]:
        """Repo-relative paths under workdir/ that differ from HEAD (user edits, shell
        commands). Uses the index's stat cache, so unchanged files are not read."""
        self.flush_index()
        return sorted({p for _, p in porcelain(self.path, WORKDIR) if p.startswith(f"{WORKDIR}/")})

    def changed_workdir_paths(self) -> list[str]:
        """`dirty_workdir_paths()` in O(changed files): the watcher names the candidates and
        each is compared with HEAD. The first look, and any look the watcher cannot answer,
        scans everything instead."""
        if not self._watch:
            return self.dirty_workdir_paths()
        watcher = self._watcher
        candidates = watcher.take() if watcher is not None else None
        if candidates is None:
            if watcher is not None:
                WATCHERS.forget(watcher)
            # Opened before the scan: a change made during it is seen by the next look.
            self._watcher = WATCHERS.open(self.path / WORKDIR, Path(self.repo.path))
            found = self._scan_workdir()
        else:
            WATCHERS.touch(watcher)
            found = self._differing(candidates | self._carry)
        self._carry = {p[len(WORKDIR) + 1:] for p in found}
        return found

    def _differing(self, candidates: Iterable[str]) -> list[str]:
        head = self.subtree(self.head_commit().tree, WORKDIR)
        work = self.path / WORKDIR
        out: set[str] = set()
        todo = list(candidates)
        seen: set[str] = set()
        while todo:
            rel = todo.pop()
            if rel in seen or not rel:
                continue
            seen.add(rel)
            try:
                entry = head[rel] if head is not None else None
            except KeyError:
                entry = None
            if isinstance(entry, pygit2.Tree):  # a folder in HEAD: look at what it held
                files: dict[str, pygit2.Oid] = {}
                walk_tree(entry, f"{rel}/", files)
                todo.extend(files)
                entry = None
            try:
                st = os.lstat(work / rel)
            except (FileNotFoundError, NotADirectoryError):
                if entry is not None:
                    out.add(rel)
                continue
            if stat.S_ISDIR(st.st_mode):  # a new folder may hold files made before its watch
                for dirpath, _, names in os.walk(work / rel):
                    base = os.path.relpath(dirpath, work)
                    todo.extend(f"{base}/{n}" for n in names)
                if entry is not None:
                    out.add(rel)  # a file replaced by a folder
                continue
            if self._file_differs(work / rel, st, entry, rel):
                out.add(rel)
        return sorted(f"{WORKDIR}/{rel}" for rel in out)

    def _file_differs(self, path: Path, st: os.stat_result, entry: Any, rel: str) -> bool:
        if stat.S_ISLNK(st.st_mode):
            oid, mode = pygit2.hash(os.readlink(path).encode()), FileMode.LINK
        elif stat.S_ISREG(st.st_mode):
            oid = pygit2.hashfile(str(path))
            mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
        else:
            return False
        if entry is None:
            return not self.repo.path_is_ignored(f"{WORKDIR}/{rel}")
        return entry.id != oid or entry.filemode != mode

    def _add_all(self) -> None:
        self.flush_index(full=True)  # libgit2 reads the index next: no sparse entries
        done = subprocess.run(["git", "-c", "gc.auto=0", "-C", str(self.path), "add", "-A",
                               "--", WORKDIR], capture_output=True, text=True)
        # An empty workdir/ with nothing in the index under it matches no file: no change.
        if done.returncode != 0 and "did not match any files" not in done.stderr:
            raise RuntimeError(f"git add failed: {done.stderr.strip()}")

    def _scan_workdir(self) -> list[str]:
        """Every path under workdir/ that differs from HEAD, found by one `git add -A` over
        workdir/ (its stat cache makes an unchanged file cost an lstat; a new one is hashed
        once and staged with its stat data, ready for `commit_workdir`)."""
        self._add_all()
        index = self.repo.index
        index.read(True)
        diff = index.diff_to_tree(self.head_commit().tree)
        out = set()
        for delta in diff.deltas:
            for rel in (delta.old_file.path, delta.new_file.path):
                if rel.startswith(f"{WORKDIR}/"):
                    out.add(rel)
        return sorted(out)

    def commit_workdir(self, *, summary: str, kind: str) -> pygit2.Oid:
        """Commit everything that differs under workdir/ at once from what `git add -A`
        staged: a first snapshot of a big folder costs what `git add -A && git commit`
        costs, not a loose write and an index insert per file."""
        self._add_all()
        index = self.repo.index
        index.read(True)
        tree = index.write_tree()
        self._carry = set()
        return self.write_checkpoint({}, summary=summary, kind=kind, tree=tree)

    def close(self) -> None:
        """Close the watcher (the session is let go)."""
        if self._watcher is not None:
            WATCHERS.forget(self._watcher)
            self._watcher = None
