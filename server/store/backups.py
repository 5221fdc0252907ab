"""`BackupStore`: what each file a turn touched looked like before the turn (DESIGN §3, §4).

Backups never enter the tracked tree. The content is a blob in the session repository's own
object database, and the per-turn manifest is a commit outside every branch, under
`refs/braid/backups/<turn_id>`, whose tree holds

    manifest.json            {"turn_id", "paths": {workdir path: {"oid", "mode"} | null}}
    blobs/<aa>/<blob hex>    every backed-up blob, so `git gc` keeps them (the manifest alone
                             would leave them unreachable)

`null` means the file did not exist before the turn: restoring it deletes the file. The first
backup of a path in a turn wins, so a file the turn writes twice keeps its pre-turn content.
The ref travels with the repository (a fork that copies refs carries it) and `git fsck` sees
ordinary objects.

A store is a thin view over one `GitSession` and keeps no state of its own: every call runs on
the session's worker thread, and the truth is the ref.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from server.base.errors import Conflict
from server.base.records import to_json_bytes
from server.git import lookup
from server.git.session import GitSession
from server.git.trees import Entry, apply_changes, file_at
from server.git.workdir import guarded
from server.git.workdir.scan import WORKDIR

REF_PREFIX = "refs/braid/backups/"
MANIFEST = "manifest.json"
BLOBS = "blobs"

# A file as git stores it: (blob id, file mode). None: the file does not exist.


class BackupStore:
    def __init__(self, git: GitSession) -> None:
        self.git = git
        self.repo = git.repo
        self.workdir = git.path / WORKDIR

    # -- the API agent tool code expects ----------------------------------------------------

    def backup_before_edit(self, turn_id: str, abs_path: str | os.PathLike[str]) -> None:
        """Record the file at `abs_path` as it is now, unless this turn already did. Called
        before every mutation, so "now" is "before the turn touched it"."""
        rel = self.relative(abs_path)
        manifest = self.manifest(turn_id)
        if rel in manifest:
            return
        entry = self._entry_on_disk(rel)
        manifest[rel] = entry
        self._write(turn_id, manifest, [entry] if entry else [])

    # -- more of the same ---------------------------------------------------------------------

    def backup_from_head(self, turn_id: str, rel_paths: Iterable[str]) -> None:
        """Back up paths something other than a file tool already changed (a shell command),
        from HEAD: the last checkpoint, which still holds their pre-turn content because no
        earlier step of this turn touched them (those are in the manifest already)."""
        manifest = self.manifest(turn_id)
        head_files = self._head_entries([p for p in rel_paths if p not in manifest])
        if not head_files:
            return
        manifest.update(head_files)
        self._write(turn_id, manifest, [e for e in head_files.values() if e])

    def manifest(self, turn_id: str) -> dict[str, Entry | None]:
        # Not `references.get` nor `tree[name]`: both leak their name (git/lookup.py).
        commit = lookup.ref_commit(self.repo, REF_PREFIX + turn_id)
        found = lookup.entry(commit.tree, MANIFEST) if commit is not None else None
        if found is None:
            return {}
        raw = json.loads(lookup.blob_data(self.repo, found.id))
        out: dict[str, Entry | None] = {}
        for rel, item in raw.get("paths", {}).items():
            out[rel] = (pygit2.Oid(hex=item["oid"]), int(item["mode"])) if item else None
        return out

    def relative(self, abs_path: str | os.PathLike[str]) -> str:
        path = Path(abs_path)
        try:
            rel = path.relative_to(self.workdir)
        except ValueError as e:
            raise ValueError(f"{abs_path} is not inside the session's workdir") from e
        if not rel.parts or ".." in rel.parts:
            raise ValueError(f"{abs_path} is not a file inside the workdir")
        return rel.as_posix()

    # -- internals ----------------------------------------------------------------------------

    def _entry_on_disk(self, rel: str) -> Entry | None:
        path = self.workdir / rel
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return self.repo.create_blob(os.fsencode(os.readlink(path))), FileMode.LINK
        if not stat.S_ISREG(st.st_mode):
            return None
        mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
        return lookup.blob_from_disk(self.repo, path), mode

    def _head_entries(self, rels: list[str]) -> dict[str, Entry | None]:
        if not rels:
            return {}
        tree = self.git.head_commit().tree
        out: dict[str, Entry | None] = {}
        for rel in rels:
            out[rel] = file_at(tree, f"{WORKDIR}/{rel}")
        return out

    def _write(self, turn_id: str, manifest: dict[str, Entry | None],
               new_blobs: list[Entry]) -> None:
        ref_name = REF_PREFIX + turn_id
        old = lookup.ref_commit(self.repo, ref_name)
        old_tree = old.tree if old is not None else None
        paths = {rel: ({"oid": str(e[0]), "mode": int(e[1])} if e else None)
                 for rel, e in sorted(manifest.items())}
        data = to_json_bytes({"turn_id": turn_id, "paths": paths})
        changes: dict[str, Entry | None] = {
            MANIFEST: (self.repo.create_blob(data), FileMode.BLOB)}
        for oid, _mode in new_blobs:  # kept alive by the ref: `blobs/<2 hex>/<id>`
            changes[f"{BLOBS}/{str(oid)[:2]}/{oid}"] = (oid, FileMode.BLOB)
        written = apply_changes(self.repo, old_tree, changes)
        assert written is not None  # it holds the manifest
        tree = written.id
        sig = self.git.signature
        commit = self.repo.create_commit(
            None, sig, sig, f"Backups of turn {turn_id}\n", tree, [])
        self.repo.references.create(ref_name, commit, force=True)



def check_writable(git: GitSession, rel: str, entry: Entry | None,
                   deleting: frozenset[str] = frozenset()) -> None:
    """Raise `Conflict` unless `write_entry(git, rel, entry)` can safely be done, once the
    paths in `deleting` are gone: never write through a symlinked folder (it could lead
    outside the workdir), never over a folder or under a file that stays."""
    guarded.check(git.path, f"{WORKDIR}/{rel}", {f"{WORKDIR}/{d}" for d in deleting})
    workdir = git.path / WORKDIR
    path = workdir / rel
    if entry is not None and path.is_dir() and not path.is_symlink():
        left = [p for p in path.rglob("*") if not p.is_dir()
                and p.relative_to(workdir).as_posix() not in deleting]
        if left:
            raise Conflict(f"cannot restore {rel}: it is a folder now")


def write_entry(git: GitSession, rel: str, entry: Entry | None) -> None:
    """Make workdir/`rel` on disk be `entry` (content and mode; None deletes it), through the
    guarded writer. Call `check_writable` first, for every path of the change."""
    if entry is None:
        guarded.delete(git.path, f"{WORKDIR}/{rel}", prune_below=WORKDIR)
        return
    oid, mode = entry
    guarded.write(git.path, f"{WORKDIR}/{rel}", lookup.blob_data(git.repo, oid),
                  executable=mode == FileMode.BLOB_EXECUTABLE, symlink=mode == FileMode.LINK)
