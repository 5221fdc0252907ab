"""Fork a session (DESIGN §4 "Fork a session"): a new session repository with the source's
whole history, made cheaply.

The object database is hard-linked file by file (as `git clone --local` does), so no object
is re-written and the fork does not depend on its source afterwards (unlike alternates, a
`git gc` in the source cannot break it). Every branch and every ref under `refs/braid/` is
carried. Each branch then gets one `fork` commit holding the fork's own `session.json`
(new `session_id`, `forked_from_session_id` = the direct parent, `root_session_id` = the
first ancestor), so whatever branch is checked out names the right session. The working tree
is checked out from HEAD; working-tree files are never linked, since tools and users edit
them in place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pygit2
from pygit2.enums import FileMode

from server.agent.turn_context import snapshot_user_edits
from server.base import crash
from server.base.errors import Busy
from server.base.fsops import SYNCERS, sync_tree
from server.base.ids import new_session_id
from server.base.names import plain_title
from server.base.records import SessionMeta, new_session_meta, to_json_bytes
from server.base.results import ForkedSession
from server.features import session_meta
from server.git import loose, objects
from server.git.commits import commit_message
from server.git.init_repo import init_unsynced
from server.git.session import GitSession
from server.git.workdir.index_format import stat_words
from server.git.workdir.scan import WORKDIR
from server.git.workdir.staging import OFF_DISK
from server.store import journal, session_settings

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.fork")
CARRIED_REFS = ("refs/heads/", "refs/braid/", "refs/tags/")
OBJECT_SUFFIXES = (".pack", ".idx", ".rev", ".bitmap", ".mtimes")


def _link_or_copy(src: str, dst: str) -> bool:
    """Hard-link `src` as `dst` (True), or copy it where links cannot be made (False)."""
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy is still correct
        shutil.copy2(src, dst)
        return False
    return True


def _link_folder(src: str, dst: str, wanted: Callable[[str], bool]) -> list[str]:
    """The object files of folder `src` (those `wanted`, no temporary one) linked into
    `dst`, made when the first one comes; the files linked (not copied). Paths as strings:
    pathlib cost more than the links (a packed source has 256 empty fan-out folders)."""
    linked: list[str] = []
    made = False
    for obj in os.scandir(src):
        if wanted(obj.name) and not obj.name.startswith("tmp"):
            if not made:
                os.makedirs(dst, exist_ok=True)
                made = True
            to = f"{dst}/{obj.name}"
            if _link_or_copy(obj.path, to):
                linked.append(to)
    return linked


def _any(name: str) -> bool:
    return True


def _pack_file(name: str) -> bool:
    return name.endswith(OBJECT_SUFFIXES)


def link_objects(src: Path, dst: Path) -> list[str]:
    """Hard-link every object file (loose objects and packs) of `src` into `dst`. Returns
    the files linked (not copied): their data is the source's, synced when it was written
    (DESIGN "Durability"), so only their new names need their folders synced. A fan-out
    folder is made only for the objects it gets: a packed source has 256 empty ones, and
    each folder made is one more to sync (issue 30)."""
    linked: list[str] = []
    into = os.fspath(dst)
    for entry in os.scandir(src):
        if not entry.is_dir():
            continue
        if len(entry.name) == 2:  # a loose-object fan-out folder
            linked += _link_folder(entry.path, f"{into}/{entry.name}", _any)
        elif entry.name == "pack":
            linked += _link_folder(entry.path, f"{into}/pack", _pack_file)
        elif entry.name == "info":
            alternates = Path(entry.path) / "alternates"
            if alternates.exists():  # a source that borrows objects lends the same
                (dst / "info").mkdir(exist_ok=True)
                shutil.copy2(alternates, dst / "info" / "alternates")
    return linked


def write_forked_refs(git: GitSession, target: Path, meta: bytes, source_id: str) -> None:
    """The fork's refs: every branch one `fork` commit on (its tree the source tip's with the
    fork's `session.json`), the other carried refs as they are. Written plainly, nothing
    synced (the folder is synced whole next, in one batch): libgit2 would sync each object,
    ref and reflog one after another (a session's backups are a ref each: issue 30).
    Branches are loose refs (a checkpoint moves those itself), the rest packed."""
    dot = target / ".git"
    objects_dir = dot / "objects"
    blob = loose.write_unsynced(objects_dir, b"blob", meta)
    entry = objects.tree_entry(FileMode.BLOB, b"session.json", blob)
    message = commit_message(f"Fork of session {source_id}", "fork", None, None)
    signature = git.signature
    packed: list[tuple[str, str]] = []
    for ref in git.repo.references.iterator():  # not `references[name]`: it leaks `name`
        name = ref.name
        if not name.startswith(CARRIED_REFS) or ref.type != pygit2.enums.ReferenceType.DIRECT:
            continue
        if not name.startswith("refs/heads/"):
            packed.append((name, str(ref.target)))
            continue
        tip = git.repo[ref.target].peel(pygit2.Commit)
        edit = objects.TreeEdit(objects.parse_tree(git.repo[tip.tree_id].read_raw()))
        edit.put(b"session.json", entry)
        tree = loose.write_unsynced(objects_dir, b"tree", edit.done()[1])
        commit = loose.write_unsynced(objects_dir, b"commit", objects.encode_commit(
            tree, [tip.id.raw], signature, signature, message))
        (dot / name).parent.mkdir(parents=True, exist_ok=True)
        (dot / name).write_bytes(commit.hex().encode() + b"\n")
        line = b"%s %s %s\t%s\n" % (b"0" * 40, commit.hex().encode(),
                                    objects.signature_line(signature),
                                    objects.reflog_message(message, 1).encode())
        (dot / "logs" / name).parent.mkdir(parents=True, exist_ok=True)
        (dot / "logs" / name).write_bytes(line)
    if packed:
        (dot / "packed-refs").write_bytes(b"# pack-refs with: sorted \n" + b"".join(
            f"{oid} {name}\n".encode() for name, oid in sorted(packed)))


def clone_session(git: GitSession, target: Path, meta: SessionMeta) -> list[str]:
    """On the source's thread: build the fork at `target`. Returns the files it linked from
    the source (`link_objects`: durable already). Nothing is synced here: the caller syncs
    the folder whole, in one batch, before the fork is listed."""
    snapshot_user_edits(git)  # the user's unsaved edits go along, committed in the source
    git.index.flush()
    head = git.branch if git.branch != "HEAD" else "main"
    init_unsynced(target, head)
    crash.at("fork.after_init")
    linked = link_objects(git.path / ".git" / "objects", target / ".git" / "objects")
    exclude = git.path / ".git" / "info" / "exclude"
    if exclude.exists():
        shutil.copy2(exclude, target / ".git" / "info" / "exclude")
    meta_bytes = to_json_bytes(meta)
    write_forked_refs(git, target, meta_bytes, str(meta["forked_from_session_id"]))
    repo = pygit2.Repository(str(target))
    crash.at("fork.after_commits")
    try:
        copy_worktree(git, repo, target, meta_bytes)
    except OSError:  # a folder we cannot link or copy from: check out from git instead
        log.warning("copying the working tree of %s failed; checking out", git.path,
                    exc_info=True)
        # A fresh folder holds no symlink the checkout could be led through.
        repo.checkout(f"refs/heads/{head}", strategy=pygit2.enums.CheckoutStrategy.FORCE)
    (target / WORKDIR).mkdir(exist_ok=True)  # git keeps no empty folders
    journal.ensure_excludes(target / ".git")
    return linked


def copy_worktree(git: GitSession, repo: pygit2.Repository, target: Path, meta: bytes) -> None:
    """The fork's working tree and index from the source's, which match the source's HEAD
    (its edits were just committed): the files the index names on disk copied (history/ and
    runs/ are skip-worktree, on disk in neither), and the index copied with `session.json`
    updated. A checkout would read every blob back out of the packs instead."""
    source = git.index.load()
    index = source.copy(target / ".git" / "index", target)
    made: set[str] = set()
    src_root, dst_root = os.fspath(git.path), os.fspath(target)
    for rel, oid, mode, words in source.on_disk(OFF_DISK):
        if rel == "session.json":
            continue
        # Strings and plain calls: pathlib and shutil cost more than the copies (issue 30).
        src, dst = f"{src_root}/{rel}", f"{dst_root}/{rel}"
        folder = os.path.dirname(dst)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        before = os.lstat(src)
        if mode == FileMode.LINK:
            os.symlink(os.readlink(src), dst)
            copied = os.lstat(dst)
        elif stat.S_ISREG(before.st_mode):
            copied = _copy_file(src, dst, 0o755 if mode == FileMode.BLOB_EXECUTABLE else None)
        else:  # no longer the file it was staged as: the checkout writes what git holds
            raise OSError(f"{rel} is not a regular file")
        # The copy's own stat data when the source file is as its entry says (unchanged
        # since it was staged, before and after the copy); else none, and git rehashes it.
        fresh = stat_words(before) == words == stat_words(os.lstat(src))
        index.set(rel, oid, mode, copied if fresh else None)
    (target / "session.json").write_bytes(meta)
    index.set("session.json", pygit2.hash(meta), FileMode.BLOB, os.lstat(target / "session.json"))
    index.write(full=True)  # the fork's libgit2 reads it first (staging.py: not sparse)


def _copy_file(src: str, dst: str, chmod: int | None) -> os.stat_result:
    """`src`'s bytes into the new file `dst` (following a symlink at neither); `dst`'s
    stat after the copy."""
    # O_NONBLOCK: a FIFO put in a file's place opens at once (and sendfile refuses it).
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        try:
            while os.sendfile(fd_out, fd_in, None, 1 << 30):
                pass
            if chmod is not None:
                os.fchmod(fd_out, chmod)
            return os.fstat(fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


async def _share_rows(braid: Services, source_id: str, new_id: str) -> None:
    """The index rows a fork shares with its source: its runs and its search rows."""
    await braid.index.copy_runs(source_id, new_id)
    await braid.search.copy_session(source_id, new_id)


def fork_title(title: str) -> str:
    """A fork's name tells it from its source: "x" → "x (fork)" → "x (fork 2)" → …"""
    if not title:
        return ""
    match = re.fullmatch(r"(.*) \(fork(?: (\d+))?\)", title)
    if match is None:
        return f"{title[:110]} (fork)"
    n = int(match.group(2) or 1) + 1
    return f"{match.group(1)[:106]} (fork {n})"


async def fork_session(braid: Services, user_id: str, session_id: str) -> ForkedSession:
    """Copy a session the user owns into a new one; returns the new session's lineage."""
    source = braid.store.get_owned(user_id, session_id)
    if await braid.locks.held(source.session_id):
        raise Busy("a run is going on in this session; fork it when the run ends")
    new_id = new_session_id()
    meta = new_session_meta(
        new_id, plain_title(fork_title(source.meta.get("title") or "")), source.user_id,
        forked_from_session_id=source.session_id,
        root_session_id=source.meta.get("root_session_id") or source.session_id)
    # The source's settings (approvals, the always list, the model...) go with it: a fork
    # is the same session's work going on elsewhere, not a fresh one (DESIGN §4 "Approvals").
    kept = cast("dict[str, object]", meta)
    for key, value in session_settings.of(source.meta).items():
        if key not in ("title", "archived"):
            kept[key] = value
    target = braid.store.path(new_id)
    await braid.packer.wait_idle(source.session_id)  # the object files must not move now
    # A marker next to the folder: a kill before the fork is whole leaves it, and start-up
    # removes the half-made folder (journal.recover_folders).
    journal.begin_folder(braid.store.root, new_id, "fork")
    try:
        def clone(git: GitSession) -> list[str]:
            linked = clone_session(git, target, meta)
            session_settings.save(target, meta, synced=False)  # synced with the folder
            return linked

        linked = await source.call(clone)
        # The runs and search rows it shares are written while the folder is synced: no
        # one can name the new session before it is listed, and start-up removes them with
        # a half-made folder (app.recovery). Listed (its session row) only once it is whole.
        rows = asyncio.ensure_future(_share_rows(braid, source.session_id, new_id))
        try:
            # Whole before it is listed; the linked objects' data is the source's.
            await asyncio.to_thread(sync_tree, target, SYNCERS, frozenset(linked))
        finally:
            await asyncio.wait([rows])  # done either way before anything is undone
        rows.result()
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        try:
            await session_meta.forget_rows(braid, new_id)
        except Exception:  # noqa: BLE001 - the fork's own error is the one to raise
            log.exception("could not forget the index rows of the fork %s", new_id)
        journal.end_folder(braid.store.root, new_id)
        raise
    crash.at("fork.after_checkout")
    handle = braid.store.get(new_id)
    await braid.index.upsert_session(handle.meta)
    journal.end_folder(braid.store.root, new_id)
    return {"session_id": new_id, "forked_from_session_id": source.session_id,
            "root_session_id": meta["root_session_id"], "title": meta["title"]}
