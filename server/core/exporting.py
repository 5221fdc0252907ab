"""Take a session's work back out (DESIGN §4 "Import and export", §5 `export_session`):
`to: branch` (a branch of the git source, see export_branch.py) or `to: folder` (three-way
against what that folder last got from this session, the import base at first: a file
changed there since is never overwritten unless `force`)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import FileMode

from .errors import BadRequest, Busy
from .export_branch import export_to_branch
from .git_session import SIGNATURE_EMAIL, SIGNATURE_NAME, GitSession
from .importing import SOURCE_BASE_REF
from .roots import Roots, roots_of
from .sources import OpenedRepo, Source, allowed_path
from .treeops import Changes, Entry, apply_changes, tree_files, workdir_tree
from .turns import snapshot_user_edits

if TYPE_CHECKING:
    from .braid import Braid
    from .settings import Settings

EXPORT_REF = "refs/braid/exports/"  # + a hash of the folder: what it was last given


def _ref_for(folder: Path) -> str:
    return EXPORT_REF + hashlib.sha256(str(folder).encode()).hexdigest()[:16]


def _disk_entry(path: Path) -> Entry | None | str:
    """The file at `path` as a (blob id, mode), None when absent, "other" for anything that
    is not a regular file (a folder, a symlink): never written over."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return "other"
    mode = FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB
    return pygit2.hashfile(str(path)), int(mode)


def _safe_dest(folder: Path, rel: str) -> Path:
    """`folder/rel`, refusing a path whose parents leave the folder through a symlink."""
    dest = folder / rel
    parent = Path(os.path.realpath(dest.parent))
    if os.path.commonpath([str(folder), str(parent)]) != str(folder):
        raise BadRequest(f"{rel} would be written outside {folder}")
    return dest


def _write(repo: pygit2.Repository, folder: Path, rel: str, entry: Entry | None) -> None:
    dest = _safe_dest(folder, rel)
    if entry is None:
        if dest.is_file() or dest.is_symlink():
            dest.unlink()
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.braid-tmp")
    tmp.write_bytes(repo[entry[0]].data)
    tmp.chmod(0o755 if entry[1] == FileMode.BLOB_EXECUTABLE else 0o644)
    os.replace(tmp, dest)


def _same(disk: Entry | None | str, entry: Entry | None) -> bool:
    """The folder's file has this content (the mode aside: a lost executable bit is no
    reason to call the user's file changed)."""
    if disk is None or entry is None:
        return disk is None and entry is None
    return isinstance(disk, tuple) and disk[0] == entry[0]


def _status(base: Entry | None, ours: Entry | None) -> str:
    return "added" if base is None else "deleted" if ours is None else "modified"


def export_to_folder(git: GitSession, folder: Path, force: bool) -> dict[str, Any]:
    repo = git.repo
    snapshot_user_edits(git)  # the user's own edits in workdir/ go out too
    head_tree = workdir_tree(git.head_commit())
    ref = repo.references.get(_ref_for(folder))
    if ref is not None:
        base_tree = repo[ref.target].peel(pygit2.Commit).tree
    elif folder.exists() and any(folder.iterdir()):
        base_ref = repo.references.get(SOURCE_BASE_REF)
        base_tree = repo[base_ref.target].peel(pygit2.Commit).tree if base_ref else None
    else:
        base_tree = None  # a new or empty folder gets every file
    base, ours = tree_files(base_tree), tree_files(head_tree)
    written: list[str] = []
    deleted: list[str] = []
    conflicts: list[dict[str, str]] = []
    given: Changes = {}  # what the folder holds from us after this export
    folder.mkdir(parents=True, exist_ok=True)
    for rel in sorted(base.keys() | ours.keys()):
        b, s = base.get(rel), ours.get(rel)
        if b == s:
            continue  # the session did not change it: whatever the folder has stays
        disk = _disk_entry(folder / rel)
        if _same(disk, s):
            given[rel] = s
            continue
        if not _same(disk, b) and not force:
            theirs = "deleted" if disk is None else "modified"
            conflicts.append({"path": rel, "ours": _status(b, s), "theirs": theirs})
            continue
        _write(repo, folder, rel, s)
        (written if s is not None else deleted).append(rel)
        given[rel] = s
    state = apply_changes(repo, base_tree, given)
    sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
    tree_id = state.id if state is not None else repo.TreeBuilder().write()
    oid = repo.create_commit(None, sig, sig, f"Exported to {folder}\n", tree_id, [])
    repo.references.create(_ref_for(folder), oid, force=True)
    return {"path": str(folder), "written": written, "deleted": deleted,
            "conflicts": conflicts}


def _folder_of(roots: Roots, value: str | None, meta: dict[str, Any]) -> Path:
    """The folder to export to: `value`, or the folder the session was imported from."""
    source = meta.get("source") or {}
    if value is None:
        if source.get("kind") != "folder":
            raise BadRequest("path is required: this session was not imported from a folder")
        value = source.get("path_or_url")
    if not isinstance(value, str):
        raise BadRequest("path must be a folder path")
    folder = allowed_path(roots, value, export=True)
    if folder.exists() and not folder.is_dir():
        raise BadRequest(f"{value} is a file, not a folder")
    return folder


def _branch_export(git: GitSession, settings: Settings, roots: Roots, meta: dict[str, Any]
                   ) -> dict:
    source = meta.get("source") or {}
    if not source.get("base_commit"):
        raise BadRequest("export to a branch needs a session imported from a git repository; "
                         "export to a folder instead")
    src = Source.from_meta(source)
    if src.local is None:
        raise BadRequest("this session was imported from a URL: export to a folder, or "
                         "import from a local clone to export to a branch")
    allowed_path(roots, str(src.local))
    snapshot_user_edits(git)
    opened = OpenedRepo(src, settings, roots)  # refuses a .git leading out of the roots
    try:
        return export_to_branch(git, opened.repo, meta)
    finally:
        opened.close()


async def export_session(braid: Braid, user_id: str, session_id: str, to: str,
                         path: str | None = None, force: bool = False) -> dict[str, Any]:
    handle = braid.store.get_owned(user_id, session_id)
    target, force_flag = to, force
    if await braid.locks.held(handle.session_id):
        raise Busy("a run is going on in this session: export when it ends")
    meta = dict(handle.meta)
    roots = await roots_of(braid, user_id)  # the caller's, checked on every export
    if target == "branch":
        if path is not None:
            raise BadRequest("path is for to=folder; a branch goes to the source repository")
        return await handle.call(lambda git: _branch_export(git, braid.settings, roots, meta))
    folder = _folder_of(roots, path, meta)
    return await handle.call(lambda git: export_to_folder(git, folder, force_flag))
