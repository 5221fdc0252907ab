"""`GitSession`: one session repository, written by rebuilding only the trees on changed paths.

Not thread-safe: pygit2 objects must stay on one thread, so each session's git work runs on
that session's own worker thread (see `store.SessionHandle`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import FileMode, FileStatus

from . import crash, guarded
from .errors import Conflict, NotFound
from .history import HISTORY, RUNS, Entry, Lines, Listings, history_path, run_path
from .watch import WATCHERS, Watcher

SIGNATURE_NAME = "Braid"
SIGNATURE_EMAIL = "braid@localhost"
WORKDIR = "workdir"
WORKTREES = "_worktrees"
TRAILER_KIND = "Braid-Kind"
TRAILER_RUN = "Braid-Run"
TRAILER_INDEX = "Braid-Message-Index"

# A change: bytes to write, None to delete, or DISK to take the file as it is on disk now.
DISK = object()
Change = bytes | None | object


@dataclass(frozen=True)
class CommitInfo:
    """The view of one checkpoint commit (DESIGN §2 ContextCommit)."""

    id: str
    parent_ids: list[str]
    kind: str
    run_id: str | None
    message_index: int | None
    summary: str
    created_at: int

    @property
    def parent_id(self) -> str | None:
        return self.parent_ids[0] if self.parent_ids else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_ids": self.parent_ids,
            "parent_id": self.parent_id,
            "kind": self.kind,
            "run_id": self.run_id,
            "message_index": self.message_index,
            "summary": self.summary,
            "created_at": self.created_at,
        }


def commit_message(summary: str, kind: str, run_id: str | None, message_index: int | None) -> str:
    lines = [summary.splitlines()[0][:200] if summary else kind, "", f"{TRAILER_KIND}: {kind}"]
    if run_id:
        lines.append(f"{TRAILER_RUN}: {run_id}")
    if message_index is not None:
        lines.append(f"{TRAILER_INDEX}: {message_index}")
    return "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Braid-"):
            out[key] = value.strip()
    return out


def commit_info(commit: pygit2.Commit) -> CommitInfo:
    trailers = parse_trailers(commit.message)
    index = trailers.get(TRAILER_INDEX)
    return CommitInfo(
        id=str(commit.id),
        parent_ids=[str(p) for p in commit.parent_ids],
        kind=trailers.get(TRAILER_KIND, "unknown"),
        run_id=trailers.get(TRAILER_RUN),
        message_index=int(index) if index and index.isdigit() else None,
        summary=commit.message.splitlines()[0] if commit.message else "",
        created_at=commit.commit_time,
    )


__all__ = ["HISTORY", "RUNS", "Entry", "history_path", "run_path"]


def to_json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode()


class GitSession:
    def __init__(self, path: Path, watch: bool = False) -> None:
        self.path = Path(path)
        self.repo = pygit2.Repository(str(self.path))
        self.signature = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
        # Blobs never change, so parsed messages can be cached by blob id.
        self._json_cache: dict[pygit2.Oid, Any] = {}
        # Index entries not yet written: writing the index is O(files in the repo), so
        # tool-batch checkpoints defer it to the turn's end (or the next status scan).
        self._index_pending: dict[str, tuple[pygit2.Oid, int] | None] = {}
        # The history and run listings of recently used trees (see history.py).
        self.listings = Listings(self.repo)
        self.lines = Lines(self.repo)
        # Other views derived from this repository (the DAG's graph, dag.py), kept with it
        # rather than in a module-wide table shared by every session.
        self.caches: dict[str, Any] = {}
        # A file-system watcher on workdir/ (watch.py), opened by the first look.
        self._watch = watch
        self._watcher: Watcher | None = None
        # Paths the last look found changed: looked at again until they match HEAD.
        self._carry: set[str] = set()

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, meta: Mapping[str, Any]) -> GitSession:
        path.mkdir(parents=True, exist_ok=False)
        pygit2.init_repository(str(path), bare=False, initial_head="main")
        (path / WORKDIR).mkdir()
        exclude = path / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        # Temporary names of the guarded writer: never shown by `git status`, never committed.
        exclude.write_text(f"/{WORKTREES}/\n{guarded.TEMP_GLOB}\n")
        git = cls(path)
        git.write_checkpoint(
            {"session.json": to_json_bytes(dict(meta))},
            summary=f"Create session {meta.get('title') or ''}".strip(),
            kind="user-edit",
        )
        return git

    # -- reading --------------------------------------------------------------------------

    @property
    def branch(self) -> str:
        if self.repo.head_is_detached:
            return "HEAD"
        return self.repo.head.shorthand

    def head_oid(self) -> pygit2.Oid:
        return self.repo.head.target

    def head_commit(self) -> pygit2.Commit:
        return self.repo.head.peel(pygit2.Commit)

    def commit(self, rev: str | pygit2.Oid) -> pygit2.Commit:
        try:
            obj = self.repo.revparse_single(str(rev)) if isinstance(rev, str) else self.repo[rev]
            return obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as e:
            raise NotFound(f"no commit {rev}") from e

    def branch_tip(self, name: str) -> pygit2.Oid:
        try:
            ref = self.repo.references.get(f"refs/heads/{name}")
        except (ValueError, pygit2.InvalidSpecError):  # not a name git accepts at all
            ref = None
        if ref is None:
            raise NotFound(f"no branch {name}")
        return ref.target

    def branches(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in self.repo.branches.local:
            out[name] = str(self.repo.branches.local[name].target)
        return out

    def read_json(self, commit: pygit2.Commit, path: str) -> Any:
        try:
            entry = commit.tree[path]
        except KeyError as e:
            raise NotFound(f"{path} is not in commit {commit.id}") from e
        return self._blob_json(entry.id)

    def _blob_json(self, oid: pygit2.Oid) -> Any:
        cached = self._json_cache.get(oid)
        if cached is None:
            cached = json.loads(self.repo[oid].data)
            self._json_cache[oid] = cached
        return cached

    def _subtree(self, tree: pygit2.Tree, name: str) -> pygit2.Tree | None:
        try:
            entry = tree[name]
        except KeyError:
            return None
        return entry if isinstance(entry, pygit2.Tree) else None

    def history_messages(self, commit: pygit2.Commit | None = None) -> list[dict[str, Any]]:
        """Every message of the branch at `commit`, oldest first, kept in memory and moved
        by what changed (history.py). The list and its dicts are shared: copy to change."""
        commit = commit or self.head_commit()
        return self.listings.messages(self._subtree(commit.tree, HISTORY), self._blob_json)

    def iter_history(self, commit: pygit2.Commit | None = None) -> Iterator[dict[str, Any]]:
        """Every message of the branch at `commit`, oldest first. Each message dict is shared
        with the cache: copy before changing it."""
        yield from self.history_messages(commit)

    def history_entries(self, commit: pygit2.Commit | None = None) -> list[Entry]:
        """The message files of the branch at `commit` (path, seq, blob), oldest first."""
        commit = commit or self.head_commit()
        return self.listings.get(HISTORY, self._subtree(commit.tree, HISTORY)).entries

    def next_seq(self, commit: pygit2.Commit | None = None) -> int:
        """The next message number (one past the newest file)."""
        commit = commit or self.head_commit()
        return self.listings.get(HISTORY, self._subtree(commit.tree, HISTORY)).next_number()

    def history_path(self, seq: int, role: str, message_id: str,
                     commit: pygit2.Commit | None = None) -> str:
        """Where message `seq` goes on the branch at `commit`, in that history's layout."""
        commit = commit or self.head_commit()
        listing = self.listings.get(HISTORY, self._subtree(commit.tree, HISTORY))
        return history_path(seq, role, message_id, listing.legacy)

    def legacy_history(self, commit: pygit2.Commit | None = None) -> bool:
        commit = commit or self.head_commit()
        return self.listings.get(HISTORY, self._subtree(commit.tree, HISTORY)).legacy

    def new_run_path(self, run_id: str, commit: pygit2.Commit | None = None) -> str:
        """Where a new run's record goes on the branch at `commit` (the next ordinal, in that
        tree's layout)."""
        commit = commit or self.head_commit()
        listing = self.listings.get(RUNS, self._subtree(commit.tree, RUNS))
        return run_path(listing.next_number(), run_id, listing.legacy)

    def iter_runs(self, commit: pygit2.Commit | None = None) -> Iterator[dict[str, Any]]:
        commit = commit or self.head_commit()
        for entry in self.listings.get(RUNS, self._subtree(commit.tree, RUNS)).entries:
            yield self._blob_json(entry.blob)

    def find_run_path(self, run_id: str, commit: pygit2.Commit | None = None) -> str | None:
        commit = commit or self.head_commit()
        listing, index = self.listings.run_index(self._subtree(commit.tree, RUNS))
        at = index.get(run_id)
        return listing.entries[at].path if at is not None else None

    def run_count(self, commit: pygit2.Commit | None = None) -> int:
        """The next run ordinal (the number of runs when none was ever taken out)."""
        commit = commit or self.head_commit()
        return self.listings.get(RUNS, self._subtree(commit.tree, RUNS)).next_number()

    def workdir_files(self, commit: pygit2.Commit | None = None) -> dict[str, pygit2.Oid]:
        """Workdir-relative path → blob id for every file of `workdir/` at `commit`."""
        commit = commit or self.head_commit()
        out: dict[str, pygit2.Oid] = {}
        tree = self._subtree(commit.tree, WORKDIR)
        if tree is not None:
            self._walk(tree, "", out)
        return out

    def _walk(self, tree: pygit2.Tree, prefix: str, out: dict[str, pygit2.Oid]) -> None:
        for entry in tree:
            if isinstance(entry, pygit2.Tree):
                self._walk(entry, f"{prefix}{entry.name}/", out)
            else:
                out[f"{prefix}{entry.name}"] = entry.id

    def commit_info(self, rev: str | pygit2.Oid) -> CommitInfo:
        return commit_info(self.commit(rev))

    # -- writing --------------------------------------------------------------------------

    def write_checkpoint(
        self,
        changes: Mapping[str, Change],
        *,
        summary: str,
        kind: str,
        run_id: str | None = None,
        message_index: int | None = None,
        extra_parents: Iterable[pygit2.Oid] = (),
        tree: pygit2.Oid | None = None,
        sync_index: bool = True,
    ) -> pygit2.Oid:
        """Write `changes` (repo-relative paths) to disk and commit them on the current branch.

        Only the trees on the changed paths are rebuilt, and only their index entries are
        touched, so the cost follows the change. The branch moves by compare-and-swap on its
        old tip: a concurrent writer makes this raise `Conflict` rather than lose a commit.
        `tree`, when given, is used as the commit's tree instead (the files must already
        match it on disk). With `sync_index=False` the index update (O(files in the repo))
        waits for the next `flush_index()`; every status scan and checkout flushes first."""
        ref = self.repo.head.name if not self.repo.head_is_unborn else "refs/heads/main"
        parent = None if self.repo.head_is_unborn else self.repo.head.target
        base_tree = self.repo[parent].peel(pygit2.Commit).tree if parent else None
        entries: dict[str, tuple[pygit2.Oid, int] | None] = {}
        for rel, content in changes.items():
            if content is DISK and guarded.left_out(self.path, rel):
                self._index_pending[rel] = None  # not in the tree: not in the index either
                continue
            entries[rel] = self._stage_one(rel, content)
        if tree is None:
            tree = self._rebuild(base_tree, _nest(entries))
        self._index_pending.update(entries)
        if sync_index:
            self.flush_index()
        parents = ([parent] if parent else []) + list(extra_parents)
        message = commit_message(summary, kind, run_id, message_index)
        crash.commit_point(kind, "before_commit")
        try:
            oid = self.repo.create_commit(
                ref, self.signature, self.signature, message, tree, parents
            )
        except pygit2.GitError as e:
            raise Conflict(f"branch moved while writing a checkpoint: {e}") from e
        crash.commit_point(kind, "after_commit")
        return oid

    def _stage_one(self, rel: str, content: Change) -> tuple[pygit2.Oid, int] | None:
        abs_path = self.path / rel
        if content is DISK:
            try:
                st = os.lstat(abs_path)
            except (FileNotFoundError, NotADirectoryError):  # a file now stands on a parent
                return None
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(abs_path).encode()
                return self.repo.create_blob(target), FileMode.LINK
            if not stat.S_ISREG(st.st_mode):
                return None
            mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
            return self.repo.create_blob_fromdisk(str(abs_path)), mode
        if content is None:
            guarded.delete(self.path, rel)  # never through a symlinked folder
            return None
        assert isinstance(content, bytes)
        guarded.write(self.path, rel, content)  # atomic; its temporary name is excluded
        return self.repo.create_blob(content), FileMode.BLOB

    def _rebuild(self, tree: pygit2.Tree | None, nested: dict[str, Any]) -> pygit2.Oid:
        builder = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        for name, change in nested.items():
            if isinstance(change, dict):
                sub = self._subtree(tree, name) if tree is not None else None
                oid = self._rebuild(sub, change)
                if len(self.repo[oid]) == 0:
                    if builder.get(name) is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, oid, FileMode.TREE)
            elif change is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, change[0], change[1])
        return builder.write()

    def flush_index(self) -> None:
        """Bring the index in step with HEAD for the paths checkpoints wrote, so `git status`
        in the session folder tells the truth."""
        if not self._index_pending:
            return
        entries, self._index_pending = self._index_pending, {}
        index = self.repo.index
        index.read(False)
        for rel, entry in entries.items():
            if entry is None:
                if rel in index:
                    index.remove(rel)
            elif (self.path / rel).exists() or (self.path / rel).is_symlink():
                index.add(rel)
        index.write()

    def commit_on_branch(
        self,
        branch: str,
        changes: Mapping[str, bytes | None],
        *,
        summary: str,
        kind: str,
        run_id: str | None = None,
        message_index: int | None = None,
    ) -> pygit2.Oid:
        """Commit `changes` on `branch`: through the working tree when it is checked out,
        else as trees only, leaving the files on disk (another branch's) untouched."""
        if not self.repo.head_is_detached and self.branch == branch:
            return self.write_checkpoint(changes, summary=summary, kind=kind, run_id=run_id,
                                         message_index=message_index)
        tip = self.branch_tip(branch)
        entries = {rel: (self.repo.create_blob(data), FileMode.BLOB) if data is not None
                   else None for rel, data in changes.items()}
        tree = self.tree_with(self.commit(tip).tree, entries)
        message = commit_message(summary, kind, run_id, message_index)
        try:
            return self.repo.create_commit(f"refs/heads/{branch}", self.signature,
                                           self.signature, message, tree, [tip])
        except pygit2.GitError as e:
            raise Conflict(f"branch {branch} moved while committing: {e}") from e

    def tree_with(
        self, base: pygit2.Tree | None, entries: Mapping[str, tuple[pygit2.Oid, int] | None]
    ) -> pygit2.Oid:
        """`base` with `entries` (repo-relative path → (blob id, mode), or None to remove)
        applied, rebuilding only the trees on those paths."""
        return self._rebuild(base, _nest(entries))

    # -- the working tree -----------------------------------------------------------------

    def dirty_workdir_paths(self) -> list[str]:
        """Repo-relative paths under workdir/ that differ from HEAD (user edits, shell
        commands). Uses the index's stat cache, so unchanged files are not read."""
        self.flush_index()
        out = []
        for path, flags in self.repo.status(untracked_files="all").items():
            if not path.startswith(f"{WORKDIR}/") or flags == FileStatus.IGNORED:
                continue
            out.append(path)
        return sorted(out)

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
        head = self._subtree(self.head_commit().tree, WORKDIR)
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
                self._walk(entry, f"{rel}/", files)
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
        self.flush_index()
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
        if self._watcher is not None:
            WATCHERS.forget(self._watcher)
            self._watcher = None

    def checkout_branch(self, name: str) -> None:
        from .atomic import checkout  # journaled, through the guarded writer

        checkout(self, name)

    def create_branch(self, name: str, target: pygit2.Oid) -> None:
        if self.repo.references.get(f"refs/heads/{name}") is not None:
            raise Conflict(f"branch {name} exists")
        self.repo.branches.local.create(name, self.repo[target].peel(pygit2.Commit))


def _nest(entries: Mapping[str, tuple[pygit2.Oid, int] | None]) -> dict[str, Any]:
    """Changes as nested dicts. A path that changed between file and folder appears both as
    `a` and `a/x`, in any order: the side that exists now wins over the other's deletion."""
    root: dict[str, Any] = {}
    for rel, entry in entries.items():
        parts = rel.split("/")
        node: dict[str, Any] | None = root
        for part in parts[:-1]:
            assert node is not None
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                if nxt is not None and entry is None:
                    node = None  # a file stands where this folder was: nothing to delete
                    break
                nxt = node[part] = {}
            node = nxt
        if node is None or (entry is None and isinstance(node.get(parts[-1]), dict)):
            continue  # a folder stands where this file was: it replaces the file
        node[parts[-1]] = entry
    return root
