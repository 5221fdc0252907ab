"""Take a session's work back out (DESIGN §4 "Import and export", §5 `export_session`):
`to: branch` (a branch of the git source, see export_branch.py) or `to: folder` (three-way
against what that folder last got from this session, the import base at first for the folder
it was imported from: a file changed there since is never overwritten unless `force`).

Export to a folder (DESIGN §4 "Boundaries") goes through directory handles (dirhandles.py):
no symlink in the folder is ever followed. Its files are staged in a private folder of the
export (a fresh random name, 0700, inside the target), then, under a record in the session's
`.git` (`braid-export.json`), renamed into place, the folder's state (`_ref_for`) moved, the
record removed: after kill -9 the next export of the session, or the start-up, finishes the
renames (or, if the files were not all staged, drops them): all or nothing. A session's
symlink is exported as a symlink (its target text as is). A clash (a folder where the session
has a file, a file or symlink where it needs a folder) is a `conflict` error listing every
conflict, with nothing written; `force` overrides only the three-way conflicts (the user's
changed files), never a clash: a folder tree is never deleted, a symlink never followed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pygit2
from pygit2.enums import FileMode

from server.agent.turn_context import snapshot_user_edits
from server.base import crash, names
from server.base.dirhandles import DIR_FLAGS, Blocked, Disk, Folder, put_file
from server.base.errors import BadRequest, Busy, Conflict, Forbidden
from server.base.fsops import sync_dir
from server.base.records import ExportRecord, SessionMeta, Skipped, SourceMeta
from server.base.results import BranchExport, FolderExport, PathConflict
from server.features.roots import Roots, roots_of
from server.features.sources.export_branch import export_to_branch
from server.features.sources.importing import SOURCE_BASE_REF
from server.features.sources.sources import OpenedRepo, Source, allowed_path
from server.git import lookup
from server.git.session import SIGNATURE_EMAIL, SIGNATURE_NAME, GitSession
from server.git.trees import Changes, Entry, apply_changes, empty_tree, files
from server.git.workdir import guarded
from server.git.workdir.scan import workdir_tree

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.base.settings import Settings

EXPORT_REF = "refs/braid/exports/"  # + a hash of the folder: what it was last given
RECORD = "braid-export.json"  # in the session's .git: an export to a folder under way
log = logging.getLogger("braid.exporting")


def _ref_for(folder: Path) -> str:
    return EXPORT_REF + hashlib.sha256(str(folder).encode()).hexdigest()[:16]


def _is_link(entry: Entry) -> bool:
    return entry[1] == FileMode.LINK


def _same(disk: Disk, entry: Entry | None) -> bool:
    """The folder's file is this one: same content, both symlinks or both files (the mode
    aside: a lost executable bit is no reason to call the user's file changed)."""
    if disk is None or entry is None:
        return disk is None and entry is None
    return isinstance(disk, tuple) and disk[0] == entry[0] and _is_link(disk) == _is_link(entry)


def _status(base: Entry | None, ours: Entry | None) -> str:
    return "added" if base is None else "deleted" if ours is None else "modified"


def _clash(disk: Disk, deleting: set[str]) -> tuple[str | None, Disk]:
    """(what stands where the session's file must go, or None; the entry to compare)."""
    if isinstance(disk, Blocked):
        if disk.prefix in deleting:
            return None, None  # a file this export deletes: gone before the folder is made
        return disk.what, disk
    if disk in ("folder", "other"):
        return str(disk), disk
    return None, disk


@dataclass
class Plan:
    writes: list[tuple[str, Entry]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    given: Changes = field(default_factory=dict)  # what the folder holds from us after it
    conflicts: list[PathConflict] = field(default_factory=list)
    clashes: int = 0
    skipped: list[Skipped] = field(default_factory=list)


def _plan(target: Folder, base: dict[str, Entry], ours: dict[str, Entry], force: bool) -> Plan:
    """Three-way, file by file, reading the folder through handles (nothing followed)."""
    plan = Plan()
    deleting: set[str] = set()
    for rel in sorted(base.keys() | ours.keys()):
        b, s = base.get(rel), ours.get(rel)
        if b == s:
            continue  # the session did not change it: whatever the folder has stays
        reason = names.why_not(rel, symlink=s is not None and _is_link(s))
        if reason:
            plan.skipped.append(names.skipped_entry(rel, reason))
            continue
        clash, disk = _clash(target.lookup(rel), deleting)
        if clash:  # never resolved by force: a folder tree is never deleted, a symlink
            plan.clashes += 1  # never followed
            plan.conflicts.append({"path": rel, "ours": _status(b, s), "theirs": clash})
            continue
        if _same(disk, s):
            plan.given[rel] = s
            continue
        if not _same(disk, b) and not force:
            theirs = "deleted" if disk is None else "modified"
            plan.conflicts.append({"path": rel, "ours": _status(b, s), "theirs": theirs})
            continue
        if s is None:
            plan.deletes.append(rel)
            deleting.add(rel)
        else:
            plan.writes.append((rel, s))
        plan.given[rel] = s
    return plan


# -- the record that makes an export all-or-nothing ------------------------------------------


def _record_path(git: GitSession) -> Path:
    return Path(git.repo.path) / RECORD


def _save(git: GitSession, record: ExportRecord) -> None:
    path = _record_path(git)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)  # on disk before the first rename it guards
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(path.parent)


def _stage(git: GitSession, target: Folder, plan: Plan, record: ExportRecord) -> None:
    """Every file of the export into the private folder, under names only we know. A
    failure (a full disk...) removes it, and the record: nothing was changed."""
    try:
        tmp_fd = target.make_private(record["tmp"])
    except OSError as e:
        _record_path(git).unlink(missing_ok=True)
        raise BadRequest(f"cannot export to {record['folder']}: {e.strerror}") from e
    try:
        record["ino"] = os.fstat(tmp_fd).st_ino  # removed at the end only if still this one
        for i, (_rel, entry) in enumerate(plan.writes):
            put_file(tmp_fd, f"w{i}", lookup.blob_data(git.repo, entry[0]), entry[1])
    except OSError as e:
        with contextlib.suppress(OSError):
            target.remove_private(record["tmp"], record.get("ino"))
        _record_path(git).unlink(missing_ok=True)
        raise BadRequest(f"cannot export to {record['folder']}: {e.strerror}") from e
    finally:
        os.close(tmp_fd)


def _finish(git: GitSession, target: Folder, record: ExportRecord) -> list[str]:
    """The renames (each done once: a retry skips what moved), then the folder's state, then
    the private folder and the record go. Idempotent: a kill anywhere is finished by it.
    Returns the paths it could not put in place (changed under it: never followed)."""
    left_out: list[str] = []
    tmp_fd = target.open_private(record["tmp"], record.get("ino"))
    if tmp_fd is not None:
        try:
            for rel, trash in record["deletes"]:
                target.move_out(rel, tmp_fd, trash)
            writes = record["writes"]
            for i, (name, rel) in enumerate(writes):
                try:
                    target.move_in(tmp_fd, name, rel)
                except (Blocked, OSError) as e:  # a symlink or a folder put there since...
                    log.warning("export to %s left %s out: %s", record["folder"], rel, e)
                    left_out.append(rel)
                if i == len(writes) // 2:
                    crash.at("export.mid_rename")
            _sync_folders(target, [rel for _, rel in writes] +
                          [rel for rel, _ in record["deletes"]])
        finally:
            os.close(tmp_fd)
    crash.at("export.after_renames")
    git.repo.references.create(record["ref"], pygit2.Oid(hex=record["state"]), force=True)
    crash.at("export.after_state")
    target.remove_private(record["tmp"], record.get("ino"))
    _record_path(git).unlink(missing_ok=True)
    return left_out


def _sync_folders(target: Folder, rels: list[str]) -> None:
    """Every folder the renames changed, fsynced: the names survive a power cut (the files'
    data was synced when staged)."""
    for rel_dir in sorted(guarded.folders_of(rels)):
        try:
            walked = target.dir_fd(rel_dir)
            if walked is None:
                continue
            # Its handle may be O_PATH (walked through only): fsync needs an open folder.
            fd = os.open(".", DIR_FLAGS, dir_fd=walked)
        except (Blocked, OSError):  # changed under it: nothing of ours to keep there
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def finish_pending(git: GitSession) -> ExportRecord | None:
    """Finish an export a killed process left (at start-up, and before the next export):
    its renames done, or, if its files were not all staged, its private folder removed.
    Returns the record of an export so finished."""
    try:
        record = cast(ExportRecord, dict(json.loads(_record_path(git).read_bytes())))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        log.warning("unreadable export record in %s: removed", git.path)
        _record_path(git).unlink(missing_ok=True)
        return None
    try:
        target = Folder.open(Path(record["folder"]), create=False)
        if target is None or record.get("phase") != "moving":
            if target is not None:
                with target:
                    target.remove_private(record["tmp"])
            _record_path(git).unlink(missing_ok=True)
            return None
        with target:
            _finish(git, target, record)
    except (Blocked, OSError) as e:  # the folder is a symlink now, or not ours to write any
        # more: nothing is written through it, and the next export is not held up by it.
        log.warning("export to %s left unfinished: %s", record["folder"], e)
        _record_path(git).unlink(missing_ok=True)
        return None
    log.warning("finished the export to %s a killed process left", record["folder"])
    return record


def _base_tree(repo: pygit2.Repository, folder: Path, target: Folder,
               source: Path | None) -> pygit2.Tree | None:
    """What the folder last got from this session: the last export's state; for the folder
    the session was imported from, the import base; otherwise nothing (a file already there
    is the user's: a conflict, never overwritten unless `force`)."""
    last = lookup.ref_commit(repo, _ref_for(folder))
    if last is not None:
        return last.tree
    if source == folder and not target.is_empty():
        base = lookup.ref_commit(repo, SOURCE_BASE_REF)
        return base.tree if base is not None else None
    return None


def _state(repo: pygit2.Repository, folder: Path, base: pygit2.Tree | None,
           given: Changes) -> pygit2.Oid | None:
    """The commit of what the folder holds from us after this export (None: unchanged)."""
    state = apply_changes(repo, base, given)
    tree_id = state.id if state is not None else empty_tree(repo).id
    last = lookup.ref_commit(repo, _ref_for(folder))
    if last is not None and last.tree_id == tree_id:
        return None
    sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
    return repo.create_commit(None, sig, sig, f"Exported to {folder}\n", tree_id, [])


def export_to_folder(git: GitSession, folder: Path, force: bool,
                     source: Path | None = None) -> FolderExport:
    """Export the session's files to `folder` (`source`: the folder it was imported from),
    all-or-nothing: staged in a private folder, then renamed into place under a record."""
    finished = finish_pending(git)
    snapshot_user_edits(git)  # the user's own edits in workdir/ go out too
    repo = git.repo
    ours = files(workdir_tree(git.head_commit()))
    try:
        target = Folder.open(folder, create=True)
    except Blocked as e:
        raise Conflict(f"cannot export to {folder}: {e}") from e
    except OSError as e:
        raise BadRequest(f"cannot export to {folder}: {e.strerror}") from e
    assert target is not None
    with target:
        base_tree = _base_tree(repo, folder, target, source)
        plan = _plan(target, files(base_tree), ours, force)
        if plan.clashes:
            raise Conflict(f"{plan.clashes} file(s) clash with a folder, a file or a symlink "
                           f"in {folder}: nothing was written", {"conflicts": plan.conflicts})
        result: FolderExport = {
            "path": str(folder), "written": [rel for rel, _ in plan.writes],
            "deleted": plan.deletes, "conflicts": plan.conflicts, "skipped": plan.skipped}
        state = _state(repo, folder, base_tree, plan.given)
        if plan.writes or plan.deletes:
            assert state is not None  # the files it writes or deletes change the state
            record: ExportRecord = {"folder": str(folder), "tmp": Folder.private_name(),
                      "ref": _ref_for(folder), "state": str(state), "phase": "staging",
                      "written": result["written"], "deleted": plan.deletes}
            _save(git, record)
            _stage(git, target, plan, record)
            crash.at("export.after_temp_files")
            record["phase"] = "moving"
            record["writes"] = [[f"w{i}", rel] for i, (rel, _) in enumerate(plan.writes)]
            record["deletes"] = [[rel, f"d{i}"] for i, rel in enumerate(plan.deletes)]
            _save(git, record)
            left_out = _finish(git, target, record)
            result["written"] = [rel for rel in result["written"] if rel not in left_out]
            result["skipped"] += [names.skipped_entry(rel, "changed in the folder meanwhile")
                                  for rel in left_out]
        elif state is not None:
            repo.references.create(_ref_for(folder), state, force=True)
    if finished is not None and finished["folder"] == str(folder):
        # A retry of an export a kill interrupted: report what that export wrote too.
        result["written"] = sorted({*finished["written"], *result["written"]})
        result["deleted"] = sorted({*finished["deleted"], *result["deleted"]})
    return result


def check_target(folder: Path) -> None:
    """No part of the folder's path may be a repository's `.git` (or what git takes for one):
    an export there would plant a git config, a hook..."""
    for part in folder.parts[1:]:
        reason = names.part_problem(part)
        if reason:
            raise Forbidden(f"cannot export to {folder}: '{names.shown(part)}' {reason}")


def _folder_of(roots: Roots, value: str | None, meta: SessionMeta) -> Path:
    """The folder to export to: `value`, or the folder the session was imported from."""
    source = meta.get("source") or SourceMeta()
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


def _branch_export(git: GitSession, settings: Settings, roots: Roots, meta: SessionMeta
                   ) -> BranchExport:
    source = meta.get("source") or SourceMeta()
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


async def export_session(braid: Services, user_id: str, session_id: str, to: str,
                         path: str | None = None, force: bool = False
                         ) -> FolderExport | BranchExport:
    handle = braid.store.get_owned(user_id, session_id)
    target, force_flag = to, force
    if await braid.locks.held(handle.session_id):
        raise Busy("a run is going on in this session: export when it ends")
    meta = handle.meta.copy()
    roots = await roots_of(braid, user_id)  # the caller's, checked on every export
    if target == "branch":
        if path is not None:
            raise BadRequest("path is for to=folder; a branch goes to the source repository")
        return await handle.call(lambda git: _branch_export(git, braid.settings, roots, meta))
    folder = _folder_of(roots, path, meta)
    check_target(folder)
    source = meta.get("source") or SourceMeta()
    where = source.get("path_or_url")
    local = Path(os.path.realpath(where)) if isinstance(where, str) and where.startswith(
        "/") else None  # a URL is no folder
    return await handle.call(lambda git: export_to_folder(git, folder, force_flag, local))
