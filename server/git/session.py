"""`GitSession`: one session repository, written by rebuilding only the trees on changed paths.

Not thread-safe: pygit2 objects must stay on one thread, so each session's git work runs on
that session's own worker thread (see `store.SessionHandle`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import FileMode

from server.base import crash, fsops, names
from server.base.errors import Conflict, NotFound
from server.base.records import SessionMeta, Skipped, to_json_bytes
from server.git import lookup, objects
from server.git.commits import (
    CommitInfo,
    commit_info,
    commit_message,
)
from server.git.history import Lines, Listings
from server.git.init_repo import init_repository
from server.git.loose import LooseWriter
from server.git.objects import TREE_MODE, BranchMoved, TreeCache, common_dir
from server.git.trees import files
from server.git.workdir import guarded
from server.git.workdir.scan import WORKDIR, WorkdirScan, holdable, workdir_tree
from server.git.workdir.staging import (
    DISK,
    Pending,
    Staged,
    StagingIndex,
    convert,
    off_disk,
    staged,
)

# What libgit2 writes itself (a branch's first commit, backups, refs outside a checkpoint)
# is synced as it is written, file and folder: a power cut leaves no ref at a missing
# object (DESIGN "Durability"). The hot path writes its own objects, synced in one batch.
pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)

SIGNATURE_NAME = "Braid"
SIGNATURE_EMAIL = "braid@localhost"
WORKTREES = "_worktrees"
# A change: bytes to write, None to delete, DISK to take the file as it is on disk now, or
# a blob already written for the file on disk (Staged, with its lstat).
Change = bytes | None | object



class GitSession:
    """One session repository: reading commits and trees, checkpoints (write_checkpoint,
    commit_on_branch), branches and worktrees. The plumbing under layout.py.

    Made of parts, each with its own state, called through: `index` (the index file, kept
    by the one writer: `git.index.flush()`), `pending` (what a live turn has not committed
    yet), `scan` (what changed in workdir/, through the watcher), `loose` and `trees` (the
    objects written from bytes, and the trees recently written)."""

    def __init__(self, path: Path, watch: bool = False) -> None:
        self.path = Path(path)
        self.repo = pygit2.Repository(str(self.path))
        self.signature = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
        # Blobs never change, so parsed messages can be cached by blob id.
        self._json_cache: dict[pygit2.Oid, Any] = {}
        # The history and run listings of recently used trees (see history.py).
        self.listings = Listings(self.repo)
        self.lines = Lines(self.repo)
        # Other views derived from this repository (the DAG's graph, dag.py), kept with it
        # rather than in a module-wide table shared by every session.
        self.caches: dict[str, Any] = {}
        # Trees and commits written from bytes (git/objects.py): the bytes of recent trees,
        # and the last commit's tree, so a checkpoint's base is not read back from disk.
        self.common = common_dir(self.repo)
        self.loose = LooseWriter(self.common / "objects")
        self.trees = TreeCache(self.repo, before_read=self.loose.settle)
        self._last_commit: tuple[pygit2.Oid, pygit2.Oid] | None = None
        self.index = StagingIndex(self.path, self.repo, self.trees)  # the one writer's
        self.pending = Pending(self.path, self.repo)
        convert(self.pending, self.index)  # a session with its history on disk: moved off it
        self.scan = WorkdirScan(self.path, self.repo, self.index, watch)  # user edits
        self.last_skipped: list[Skipped] = []  # what the last checkpoint left out

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, meta: SessionMeta) -> GitSession:
        path.mkdir(parents=True, exist_ok=False)
        init_repository(path, "main")  # pygit2's leaks a repository (git/init_repo.py)
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
        return lookup.ref_oid(self.repo.head)

    def head_commit(self) -> pygit2.Commit:
        return self.repo.head.peel(pygit2.Commit)

    def commit(self, rev: str | pygit2.Oid) -> pygit2.Commit:
        try:
            obj = self.repo.revparse_single(str(rev)) if isinstance(rev, str) else self.repo[rev]
            return obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as e:
            raise NotFound(f"no commit {rev}") from e

    def branch_tip(self, name: str) -> pygit2.Oid:
        # Not `references.get`: pygit2 leaks its name argument (git/lookup.py).
        target = lookup.branch_target(self.repo, name)
        if target is None:
            raise NotFound(f"no branch {name}")
        return target

    def branches(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in self.repo.branches.local:
            out[name] = str(self.repo.branches.local[name].target)
        return out

    def read_json(self, commit: pygit2.Commit, path: str) -> Any:
        entry = lookup.at_path(commit.tree, path)  # not `tree[path]`: it leaks `path`
        if entry is None:
            raise NotFound(f"{path} is not in commit {commit.id}")
        return self.blob_json(entry.id)

    def blob_json(self, oid: pygit2.Oid) -> Any:
        cached = self._json_cache.get(oid)
        if cached is None:
            cached = json.loads(lookup.blob_data(self.repo, oid))
            self._json_cache[oid] = cached
        return cached

    def workdir_files(self, commit: pygit2.Commit | None = None) -> dict[str, pygit2.Oid]:
        """Workdir-relative path → blob id for every file of `workdir/` at `commit`."""
        tree = workdir_tree(commit or self.head_commit())
        return {path: entry[0] for path, entry in files(tree).items()}

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
        sync_index: bool = True,
    ) -> pygit2.Oid:
        """Write `changes` (repo-relative paths) to disk and commit them on the current branch.

        Only the trees on the changed paths are rebuilt, and only their index entries are
        touched, so the cost follows the change. The branch moves by compare-and-swap on its
        old tip: a concurrent writer makes this raise `Conflict` rather than lose a commit.
        With `sync_index=False` the index update (O(files in the repo))
        waits for the next `index.flush()`; every status scan and checkout flushes first.

        A file on disk whose name git cannot hold (names.py) is left out, and listed in the
        commit's message and in `self.last_skipped` (until the next call)."""
        changes, left_out = holdable(changes, self.path)
        skipped = [names.skipped_entry(rel[len(WORKDIR) + 1:] if rel.startswith(f"{WORKDIR}/")
                                       else rel, reason) for rel, reason in left_out]
        parent: pygit2.Oid | None
        if self.repo.head_is_unborn:
            ref, parent = "refs/heads/main", None
        else:
            head = self.repo.head
            ref, parent = head.name, lookup.ref_oid(head)
        parents = ([parent] if parent else []) + list(extra_parents)
        message = commit_message(summary, kind, run_id, message_index, skipped)
        self.loose.begin()  # the objects' files written together, before the branch moves
        try:
            entries: dict[str, Staged | None] = {}
            for rel, content in changes.items():
                if content is DISK and guarded.left_out(self.path, rel):
                    self.index.queue(rel, None)  # not in the tree: not in the index either
                    continue
                entries[rel] = self._stage_one(rel, content)
            base = self._tree_id(parent) if parent is not None else None
            tree = self._root(base, objects.nest(entries))
            self.index.queue_commit(entries, base.raw if base is not None else None, tree.raw)
            written = self._commit_object(ref, tree, parents, message)
            held = self._lock_branch(ref, parents, written)
        except BaseException:
            self.loose.finish()
            raise
        try:
            # The objects, and the files this commit holds as they are in the working tree,
            # are on disk before the branch moves (DESIGN "Durability"): one batch of syncs,
            # the branch's lock file (the new id) in it too.
            self.loose.finish([*self._disk_syncs(entries), *([held.sync] if held else [])])
            if sync_index:
                self.index.flush()
            crash.commit_point(kind, "before_commit")
            if held is not None and written is not None:
                held.publish(self.repo, self.common, self.signature,
                             objects.reflog_message(message, len(parents)), head_log=True)
                oid = pygit2.Oid(raw=written)
                self._last_commit = (oid, tree)
            else:
                oid = self._commit(ref, tree, parents, message, head_log=True,
                                   written=written)
        except BaseException:
            if held is not None:
                held.abandon()
            raise
        crash.commit_point(kind, "after_commit")
        self.pending.drop(changes)  # the live turn's pending files are committed now
        self.last_skipped = skipped
        self.scan.note_listed(rel for rel, _ in left_out)
        return oid

    def _disk_syncs(self, entries: Mapping[str, Staged | None]) -> list[Callable[[], None]]:
        """The syncs that keep a checkpoint's working-tree files through a power cut: each
        file written or taken from disk, then every folder above the paths it changed."""
        on_disk = [rel for rel in entries if not off_disk(rel)]
        root = self.path
        calls: list[Callable[[], None]] = [
            functools.partial(guarded.sync, root, rel) for rel in on_disk
            if entries[rel] is not None]
        calls += [functools.partial(guarded.sync_folder, root, rel)
                  for rel in sorted(guarded.folders_of(on_disk))]
        return calls

    def commit_workdir(self, paths: list[str], *, summary: str, kind: str) -> pygit2.Oid:
        """Commit `paths` (repo-relative, under workdir/) as they are on disk, their blobs
        written as one pack (WorkdirScan.pack)."""
        return self.write_checkpoint(self.scan.pack(paths), summary=summary, kind=kind)

    def close(self) -> None:
        """Let the session go: its watcher is closed."""
        self.scan.close()

    def _commit_object(self, ref: str, tree: pygit2.Oid, parents: list[pygit2.Oid],
                       message: str) -> bytes | None:
        """The commit written from its bytes (its raw id), or None: libgit2 writes it."""
        if not parents or not ref.startswith("refs/heads/"):
            return None
        sig = self.signature
        data = objects.encode_commit(tree.raw, [p.raw for p in parents], sig, sig, message)
        return self.loose.write(b"commit", data)

    def _lock_branch(self, ref: str, parents: list[pygit2.Oid],
                     written: bytes | None) -> objects.HeldBranch | None:
        """The branch locked for the commit `written` (the new id in its lock file, synced
        with the checkpoint's batch), or None: `_commit` moves it the usual way."""
        if written is None or not parents:
            return None
        try:
            return objects.lock_branch(self.common, ref, parents[0].raw, written)
        except BranchMoved as e:
            raise Conflict(f"branch moved while writing a checkpoint: {e}") from e

    def _commit(self, ref: str, tree: pygit2.Oid, parents: list[pygit2.Oid], message: str,
                head_log: bool, written: bytes | None = None) -> pygit2.Oid:
        """Write the commit (unless `written`) and move `ref` from `parents[0]` to it, or
        raise Conflict. From bytes and by git's lock protocol (git/objects.py); libgit2 does
        the unusual cases (no parent, a packed or detached ref)."""
        sig = self.signature
        if parents and ref.startswith("refs/heads/"):
            raw = written or self._commit_object(ref, tree, parents, message)
            assert raw is not None
            log = objects.reflog_message(message, len(parents))
            try:
                moved = objects.move_branch(self.repo, self.common, ref, parents[0].raw, raw,
                                               sig, log, head_log)
            except BranchMoved as e:
                raise Conflict(f"branch moved while writing a checkpoint: {e}") from e
            if moved:
                oid = pygit2.Oid(raw=raw)
                self._last_commit = (oid, tree)
                return oid
        try:
            oid = self.repo.create_commit(ref, sig, sig, message, tree, parents)
        except pygit2.GitError as e:
            raise Conflict(f"branch moved while writing a checkpoint: {e}") from e
        self._last_commit = (oid, tree)
        return oid

    def _tree_id(self, commit: pygit2.Oid) -> pygit2.Oid:
        """The tree of `commit` (the last one written is known without reading it)."""
        last = self._last_commit
        if last is not None and last[0] == commit:
            return last[1]
        return self.repo[commit].peel(pygit2.Commit).tree_id

    def blob(self, data: bytes) -> pygit2.Oid:
        """A blob of `data`, written as a loose object from its bytes (git/objects.py)."""
        return pygit2.Oid(raw=self.loose.write(b"blob", data))

    def _stage_one(self, rel: str, content: Change) -> Staged | None:
        """Write one change and return its index entry (the stat is taken before the file
        is read, or after it is written: a later change shows as a stat mismatch)."""
        if off_disk(rel):
            return self._stage_off_disk(rel, content)
        if isinstance(content, Staged):  # its blob is written (commit_workdir)
            return content
        abs_path = self.path / rel
        if content is DISK:
            taken = time.time()
            try:
                st = os.lstat(abs_path)
            except (FileNotFoundError, NotADirectoryError):  # a file now stands on a parent
                return None
            if stat.S_ISLNK(st.st_mode):
                target = os.fsencode(os.readlink(abs_path))  # the bytes, UTF-8 or not
                return Staged(self.blob(target), FileMode.LINK, st, taken)
            if not stat.S_ISREG(st.st_mode):
                return None
            mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
            return Staged(lookup.blob_from_disk(self.repo, abs_path, self.blob), mode, st, taken)
        if content is None:
            guarded.delete(self.path, rel)  # never through a symlinked folder
            return None
        assert isinstance(content, bytes)
        guarded.write(self.path, rel, content)  # atomic; its temporary name is excluded
        return staged(self.blob(content), FileMode.BLOB, abs_path)

    def _stage_off_disk(self, rel: str, content: Change) -> Staged | None:
        """A history/ or runs/ file: a blob only, never written to disk (DISK: the pending
        file a killed turn left)."""
        if content is DISK:
            content = self.pending.read(rel)
        if content is None:
            return None
        assert isinstance(content, bytes)
        return Staged(self.blob(content), FileMode.BLOB)

    def _root(self, base: pygit2.Oid | None, nested: dict[str, Any]) -> pygit2.Oid:
        """The root tree: `base` with `nested` applied (an empty tree when nothing is left)."""
        raw = self._rebuild(base.raw if base is not None else None, nested)
        if raw is None:
            raw = self.loose.write(b"tree", b"")
        return pygit2.Oid(raw=raw)

    def _rebuild(self, base: bytes | None, nested: dict[str, Any]) -> bytes | None:
        """The tree `base` (raw id) with `nested` applied, as bytes (git/objects.py): only the
        trees on changed paths are written; None when it ends up empty (its entry goes)."""
        edit = objects.TreeEdit(self.trees.entries(base) if base is not None else {})
        for name, change in nested.items():
            key = name.encode()
            if isinstance(change, dict):
                old = edit.entries.get(key)
                made = self._rebuild(objects.entry_tree(old) if old else None, change)
                if made is None:
                    edit.entries.pop(key, None)
                    continue
                mode, raw = TREE_MODE, made
            elif change is None:
                edit.entries.pop(key, None)
                continue
            else:
                mode, raw = int(change[1]), change[0].raw
            if edit.put(key, objects.tree_entry(mode, key, raw)) and \
                    not objects.plain_name(name):
                self.loose.settle()  # libgit2 judges the name, and looks the object up
                objects.check_name(name, self.repo, pygit2.Oid(raw=raw), mode)
        if not edit.entries:
            return None
        entries, data = edit.done()
        raw = self.loose.write(b"tree", data)
        self.trees.put(raw, entries, len(data))
        return raw

    def commit_on_branch(
        self,
        branch: str,
        changes: Mapping[str, bytes | tuple[pygit2.Oid, int] | None],
        *,
        summary: str,
        kind: str,
        run_id: str | None = None,
        message_index: int | None = None,
    ) -> pygit2.Oid:
        """Commit `changes` on `branch`: through the working tree when it is checked out,
        else as trees only, leaving the files on disk (another branch's) untouched. A change
        may be an object already written, `(id, mode)` (a whole folder: a tree), only on a
        branch not checked out."""
        if not self.repo.head_is_detached and self.branch == branch:
            if any(isinstance(c, tuple) for c in changes.values()):
                raise ValueError("objects by id are committed only on a branch not checked out")
            return self.write_checkpoint(changes, summary=summary, kind=kind, run_id=run_id,
                                         message_index=message_index)
        tip = self.branch_tip(branch)
        ref = f"refs/heads/{branch}"
        message = commit_message(summary, kind, run_id, message_index)
        self.loose.begin()
        try:
            entries = {rel: data if isinstance(data, tuple) else
                       (self.blob(data), FileMode.BLOB) if data is not None
                       else None for rel, data in changes.items()}
            tree = self._root(self._tree_id(tip), objects.nest(entries))
            written = self._commit_object(ref, tree, [tip], message)
        finally:
            self.loose.finish()
        return self._commit(ref, tree, [tip], message, head_log=False, written=written)

    def tree_with(
        self, base: pygit2.Tree | None, entries: Mapping[str, Sequence[Any] | None]
    ) -> pygit2.Oid:
        """`base` with `entries` (repo-relative path → (blob id, mode), or None to remove)
        applied, rebuilding only the trees on those paths."""
        return self._root(base.id if base is not None else None, objects.nest(entries))

    def remove_worktree(self, name: str) -> None:
        """Forget a worktree and delete its folder (pygit2's prune leaves the folder)."""
        try:
            self.repo.lookup_worktree(name).prune(True)
        except (KeyError, pygit2.GitError):
            pass
        folder = self.path / WORKTREES / name
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)

    def create_branch(self, name: str, target: pygit2.Oid) -> None:
        if lookup.branch_target(self.repo, name) is not None:
            raise Conflict(f"branch {name} exists")
        self.repo.branches.local.create(name, self.repo[target].peel(pygit2.Commit))

    def delete_branch(self, name: str) -> None:
        """Delete the branch `name` (its loose ref, its line in packed-refs, its reflog), then
        sync the folders that held them: a power cut never brings it back."""
        if lookup.branch_target(self.repo, name) is None:
            raise NotFound(f"no branch {name}")
        self.repo.branches.local.delete(name)
        fsops.sync_dirs([self.common / "refs" / "heads", self.common])
