"""A session from the user's own project (DESIGN §4 "Import and export"): the source's files
become the session's first commit (`Braid-Kind: import`), written as blobs and trees directly
(no `git add`), and `session.json` names the source and, for git, the base commit.

Everything that can fail (roots, a missing path, a bad ref, a clone, a source past the size
limits) fails before the session folder is made or removes it, so a failed import leaves
nothing behind. Under kill -9 a marker next to the folder (`sessions/.<id>.intent`, as a
fork's) makes start-up remove a half-made folder (journal.recover_folders); a whole one
(session.json, its import commit, a clean status) is kept and indexed."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import FileMode

from server.base import crash
from server.base.budget import Budget
from server.base.errors import BadRequest
from server.base.ids import is_session_id
from server.base.records import SessionMeta, to_json_bytes
from server.base.results import CreatedSession
from server.features.roots import Roots, roots_of
from server.features.sources.sources import (
    OpenedRepo,
    Snapshot,
    Source,
    SourceRequest,
    resolve_commit,
    resolve_source,
    snapshot_folder,
    snapshot_git,
)
from server.git import lookup
from server.git.commits import TRAILER_KIND
from server.git.init_repo import init_repository
from server.git.safe import run_git
from server.git.session import SIGNATURE_EMAIL, SIGNATURE_NAME, WORKTREES
from server.git.trees import Entry, apply_changes, empty_tree
from server.git.workdir.index_file import GitIndex
from server.git.workdir.index_format import tree_entries
from server.git.workdir.scan import WORKDIR
from server.store import journal

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.base.settings import Settings

TRAILER_SOURCE = "Braid-Source"
TRAILER_SOURCE_COMMIT = "Braid-Source-Commit"
# The source's files as last brought in (the import, or the last "Update from source"): the
# base of three-way updates and folder exports. A commit whose tree is the workdir's.
SOURCE_BASE_REF = "refs/braid/source-base"


def import_message(source: Source, snap: Snapshot) -> str:
    where = source.path_or_url + (f" at {source.ref}" if source.ref else "")
    lines = [f"Import {where}"[:200], ""]
    if snap.skipped:
        lines += [f"Skipped {len(snap.skipped)} file(s):"]
        lines += [f"  {s['path']} ({s['reason']}, {s.get('size', 0)} bytes)"
                  for s in snap.skipped[:50]]
        lines.append("")
    lines += [f"{TRAILER_KIND}: import", f"{TRAILER_SOURCE}: {source.kind} {source.path_or_url}"]
    if snap.base_commit:
        lines.append(f"{TRAILER_SOURCE_COMMIT}: {snap.base_commit}")
    return "\n".join(lines) + "\n"


def take_snapshot(repo: pygit2.Repository, source: Source, settings: Settings, roots: Roots,
                  workdir: Path | None = None) -> Snapshot:
    """The source's files now, as a tree in `repo` (and files in `workdir`), read as the
    caller may (their roots; never git running the source's own code); TooLarge past
    BRAID_IMPORT_MAX_BYTES / _FILES, counted as they arrive."""
    budget = Budget.of(settings)
    if source.kind == "folder":
        assert source.local is not None
        if not source.local.is_dir():
            raise BadRequest(f"the source folder {source.path_or_url} is gone")
        return snapshot_folder(repo, source.local, settings.import_max_file, workdir, budget,
                               roots=roots)
    opened = OpenedRepo(source, settings, roots)
    try:
        commit = resolve_commit(opened.repo, source.ref)
        return snapshot_git(repo, opened.repo, commit, settings.import_max_file, workdir,
                            budget)
    finally:
        opened.close()


def check_source_readable(source: Source, settings: Settings, roots: Roots) -> None:
    """Fail early (before any session folder exists) on a repository that cannot be read
    or a ref it does not have. A URL is checked by the clone itself, later."""
    if source.kind == "git" and source.local is not None:
        opened = OpenedRepo(source, settings, roots)
        try:
            resolve_commit(opened.repo, source.ref)
        finally:
            opened.close()


def set_source_base(repo: pygit2.Repository, tree: pygit2.Oid | None, note: str) -> None:
    tree = tree or empty_tree(repo).id
    sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
    oid = repo.create_commit(None, sig, sig, note + "\n", tree, [])
    repo.references.create(SOURCE_BASE_REF, oid, force=True)


def refresh_index(repo: pygit2.Repository, path: Path, tree: pygit2.Oid) -> None:
    """The index = the commit's tree, with stat data filled in by one `git update-index
    --refresh` pass, so later status checks do not rehash every imported file."""
    index = GitIndex(Path(repo.path) / "index", path, read=False)
    index.reset(tree_entries(lookup.tree_at(repo, tree), ""))
    index.write()
    run_git(["-C", str(path), "update-index", "-q", "--refresh"])


def build_import(path: Path, meta: SessionMeta, source: Source, settings: Settings,
                 roots: Roots) -> SessionMeta:
    """Make the session folder at `path` with the import as its first (root) commit."""
    check_source_readable(source, settings, roots)
    path.mkdir(parents=True, exist_ok=False)
    init_repository(path, "main")  # pygit2's leaks a repository (git/init_repo.py)
    repo = pygit2.Repository(str(path))
    (path / WORKDIR).mkdir()
    exclude = path / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text(f"/{WORKTREES}/\n")
    snap = take_snapshot(repo, source, settings, roots, path / WORKDIR)
    crash.at("import.after_files")
    meta["source"] = source.meta(snap.base_commit)
    meta["import"] = snap.summary()
    if not meta.get("title"):
        meta["title"] = Path(source.path_or_url.rstrip("/")).name.removesuffix(".git")[:120]
    data = to_json_bytes(meta)
    files: dict[str, Entry | None] = {"session.json": (repo.create_blob(data), FileMode.BLOB)}
    if snap.tree is not None:
        files[WORKDIR] = (snap.tree, FileMode.TREE)
    written = apply_changes(repo, None, files)
    assert written is not None  # it holds session.json
    tree = written.id
    sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL)
    repo.create_commit("refs/heads/main", sig, sig, import_message(source, snap), tree, [])
    set_source_base(repo, snap.tree, f"Source files at import ({source.path_or_url})")
    crash.at("import.after_commit")
    # A folder with session.json is a session (store.all_ids): written only once the
    # commit holds everything, so a crash before leaves no half session the app would list.
    (path / "session.json").write_bytes(data)
    crash.at("import.after_meta")
    refresh_index(repo, path, tree)
    return meta


_STARTED = time.time()


def sweep_leftovers(sessions_root: Path, tmp_root: Path) -> None:
    """Remove what an import killed mid-way (kill -9) left: a session folder with neither
    session.json nor a first commit, a clone. Only from before this process started (ours
    are live); a folder with a commit is left for recovery to judge."""
    candidates = [p for p in sessions_root.iterdir() if is_session_id(p.name)] \
        if sessions_root.is_dir() else []
    # A folder marker killed while it was being written (journal._write_atomic's temporary).
    for tmp in sessions_root.glob(".*.intent.*.new") if sessions_root.is_dir() else ():
        try:
            if tmp.stat().st_mtime < _STARTED:
                tmp.unlink()
        except OSError:
            pass
    candidates += list(tmp_root.glob("clone-*")) if tmp_root.is_dir() else []
    for path in candidates:
        try:
            git_dir = path / ".git"
            committed = (git_dir / "refs" / "heads" / "main").exists() or \
                (git_dir / "packed-refs").exists()
            if not (path / "session.json").exists() and not committed \
                    and path.stat().st_mtime < _STARTED:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def import_title(where: str, taken: set[str]) -> str:
    """A new import's title: the folder's or repository's name; when the user has a session
    of that name already, with the folder it sits in ("app (work)"), then a number."""
    parts = [p for p in where.rstrip("/").replace(":", "/").split("/") if p]
    name = (parts[-1].removesuffix(".git") if parts else "") or "Imported"
    candidates = [name]
    if len(parts) > 1:
        candidates.append(f"{name} ({parts[-2]})")
    candidates += [f"{name} ({n})" for n in range(2, 1000)]
    return next(c for c in candidates if c[:120] not in taken)[:120]


async def import_session(braid: Services, user_id: str, asked: SourceRequest | None,
                         title: str, model: str | None = None) -> CreatedSession:
    if asked is None:  # a plain new session with its model chosen
        handle = await braid.store.create(user_id, title, model=model)
        await braid.index.upsert_session(handle.meta)
        return {"session_id": handle.session_id, "title": handle.meta["title"]}
    roots = await roots_of(braid, user_id)  # the caller's own, never the server's
    source = resolve_source(braid.settings, roots, asked)
    sweep_leftovers(braid.store.root, braid.settings.data_dir / "tmp")

    root = braid.store.root

    def build(path: Path, meta: SessionMeta) -> None:
        root.mkdir(parents=True, exist_ok=True)
        journal.begin_folder(root, path.name, "import")
        try:
            build_import(path, meta, source, braid.settings, roots)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # before the marker that guards it goes
            journal.end_folder(root, path.name)
            raise

    if not title:  # the folder's or repository's name, told apart from the user's others
        taken = {str(row.get("title") or "") for archived in (False, True)
                 for row in await braid.index.list_sessions(user_id, archived=archived)}
        title = import_title(source.path_or_url, taken)
    handle = await braid.store.create(user_id, title, model=model, build=build)
    crash.at("import.after_build")
    await braid.index.upsert_session(handle.meta)
    crash.at("import.after_index")
    journal.end_folder(root, handle.session_id)
    return {"session_id": handle.session_id, "title": handle.meta["title"],
            "source": handle.meta["source"], "import": handle.meta["import"]}
