"""The workdir as the file panel sees it (DESIGN §5 `list_files`, GET files, workdir.zip):
a folder's entries or a file's bytes at a ref (a branch or a commit, default HEAD), and the
whole workdir of a commit as a zip, streamed (`ZipStream`). Uploads are in uploads.py; the
parameters they share (`path_param`) are here.

Everything reads committed trees (what a ref holds), never the files on disk."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import subprocess
import threading
import unicodedata
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import pygit2
from pygit2.enums import FileMode

from server.base.errors import BadRequest, BraidError, Forbidden, NotFound
from server.git import lookup
from server.git.branches import branch_words, is_run
from server.git.session import GitSession
from server.git.trees import walk
from server.git.workdir.scan import WORKDIR

if TYPE_CHECKING:
    from server.agent.services import Services

log = logging.getLogger("braid.files")
ZIP_CHUNK = 256 * 1024  # bytes per chunk sent
ZIP_AHEAD = 8  # chunks made ahead of a slow client
_STREAMS = threading.BoundedSemaphore(8)  # streams made at once; others wait their turn
ZIP_WHOLE = 8 << 20  # a blob up to this is read whole; a bigger one is streamed (git)
MAX_PATH = 1024
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_BRANCH = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")


# -- parameters ---------------------------------------------------------------------------


def ref_param(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("ref must be a string")
    if value.startswith("-") or ".." in value or not (_HEX.match(value) or _BRANCH.match(value)):
        raise BadRequest("ref must be a branch name or a commit id")
    return value


def path_param(value: object, *, required: bool = False) -> str:
    """A workdir-relative path: no absolute path, no `..`, no empty or control parts."""
    if value is None or value == "":
        if required:
            raise BadRequest("path is required")
        return ""
    if not isinstance(value, str):
        raise BadRequest("path must be a string")
    if len(value) > MAX_PATH:
        raise BadRequest("path is too long")
    if any(ord(ch) < 32 or 0xD800 <= ord(ch) <= 0xDFFF for ch in value) or "\\" in value:
        raise BadRequest("path must not hold control characters or backslashes")
    parts = value.strip("/").split("/")
    if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise Forbidden("paths must stay inside the workdir")
    if parts[0] == ".git":
        raise Forbidden("paths must stay inside the workdir")
    return "/".join(parts)


# -- reading ------------------------------------------------------------------------------


def resolve(git: GitSession, ref: str | None) -> tuple[pygit2.Commit, str]:
    """The commit a ref names and how to call it: a branch (its tip) or a commit id."""
    if ref is None:
        return git.head_commit(), git.branch
    if ref in git.branches():
        return git.commit(git.branch_tip(ref)), ref
    if _HEX.match(ref):
        try:
            obj = git.repo[ref] if len(ref) == 40 else git.repo.revparse_single(ref)
            return obj.peel(pygit2.Commit), str(obj.peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as e:
            raise NotFound(f"no commit {ref}") from e
    raise NotFound(f"no branch {ref}")


def _node(commit: pygit2.Commit, path: str) -> pygit2.Object | None:
    rel = f"{WORKDIR}/{path}" if path else WORKDIR
    return lookup.at_path(commit.tree, rel)  # not `tree[rel]`: it leaks `rel`


class PathEntry(TypedDict):
    """A folder's entry as the file panel lists it (`size` None: a folder)."""

    path: str
    type: str  # "dir" | "file"
    size: int | None


class PathRead(TypedDict):
    """A folder's entries or a file's bytes at a ref (over ZIP_WHOLE: `data` None and a
    `stream` of them)."""

    ref: str
    commit_id: str
    path: str
    type: str  # "dir" | "file"
    entries: NotRequired[list[PathEntry]]
    size: NotRequired[int]
    mode: NotRequired[int]
    data: NotRequired[bytes | None]
    stream: NotRequired[RepoStream]


def _entries(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> list[PathEntry]:
    out: list[PathEntry] = []
    for entry in tree:
        rel = f"{path}/{entry.name}" if path else str(entry.name)  # a tree entry has a name
        if isinstance(entry, pygit2.Tree):
            out.append({"path": rel, "type": "dir", "size": None})
        else:  # the size from the object's header: `entry.size` reads the whole blob
            out.append({"path": rel, "type": "file", "size": repo.odb.read_header(entry.id)[1]})
    out.sort(key=lambda e: (e["type"] != "dir", e["path"].lower()))
    return out


def read_path(git: GitSession, ref: str | None, path: str) -> PathRead:
    """{ref, commit_id, path, type, entries | data}: a folder's entries or a file's bytes
    (over ZIP_WHOLE: `data` None and a `stream` of them)."""
    commit, name = resolve(git, ref)
    node = _node(commit, path)
    got: PathRead = {"ref": name, "commit_id": str(commit.id), "path": path, "type": "dir"}
    if node is None:
        if not path:  # a session without files yet
            got["entries"] = []
            return got
        raise NotFound(f"no file or folder {path} at {name}")
    if isinstance(node, pygit2.Tree):
        got["entries"] = _entries(git.repo, node, path)
        return got
    size = git.repo.odb.read_header(node.id)[1]
    got.update({"type": "file", "size": size, "mode": int(node.filemode)})
    if size > ZIP_WHOLE:  # sent as it is read (`stream`), never whole in memory
        oid = node.id
        got.update({"data": None, "stream": RepoStream(
            git.path, lambda repo, out: _copy_blob(repo, oid, size, out))})
        return got
    got["data"] = lookup.blob_data(git.repo, node.id)
    return got


def _copy_blob(repo: pygit2.Repository, oid: pygit2.Oid, size: int, out: _Pipe) -> None:
    for chunk in _blob_chunks(repo, oid, size):
        out.write(chunk)


class _Pipe:
    """What zipfile writes to: gathered into chunks handed to `put` (no `tell`: zipfile then
    writes an unseekable zip, sizes in data descriptors)."""

    def __init__(self, put: Callable[[bytes], None]) -> None:
        self.put = put
        self.buf = bytearray()

    def write(self, data: bytes) -> int:
        self.buf += data
        if len(self.buf) >= ZIP_CHUNK:
            self.put(bytes(self.buf))
            self.buf.clear()
        return len(data)

    def flush(self) -> None:
        if self.buf:
            self.put(bytes(self.buf))
            self.buf.clear()


def write_zip(repo: pygit2.Repository, commit_id: str, out: Any) -> None:
    """The workdir of a commit as a zip written to `out` as it goes: one blob in memory at a
    time (paths relative to workdir/, modes kept)."""
    commit = repo[commit_id].peel(pygit2.Commit)
    root = _node(commit, "")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        if isinstance(root, pygit2.Tree):
            _zip_tree(repo, zf, root)


def _zip_tree(repo: pygit2.Repository, zf: zipfile.ZipFile, tree: pygit2.Tree) -> None:
    for rel, entry in walk(tree):
        info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
        mode = int(entry.filemode)
        kind = stat.S_IFLNK if mode == FileMode.LINK else stat.S_IFREG
        perm = 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644
        info.external_attr = (kind | perm) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        _, size = repo.odb.read_header(entry.id)
        info.file_size = size  # so zipfile picks zip64 for a big one
        with zf.open(info, "w") as dest:
            for chunk in _blob_chunks(repo, entry.id, size):
                dest.write(chunk)


def _blob_chunks(repo: pygit2.Repository, oid: pygit2.Oid, size: int) -> Iterator[bytes]:
    """A blob's bytes in chunks. libgit2 reads an object whole (and a loose one twice over:
    deflated and inflated), so a big blob is streamed by git itself (`cat-file` streams
    loose and whole packed blobs), in its own process."""
    if size <= ZIP_WHOLE:
        data = lookup.blob_data(repo, oid)
        for at in range(0, len(data), ZIP_CHUNK):
            yield data[at:at + ZIP_CHUNK]
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.Popen(["git", "--no-replace-objects", f"--git-dir={repo.path}",
                             "cat-file", "blob", str(oid)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    try:
        got = 0
        while chunk := proc.stdout.read(ZIP_CHUNK):
            got += len(chunk)
            yield chunk
        if proc.wait() != 0 or got != size:
            raise RuntimeError(f"git cat-file gave {got} of {size} bytes of {oid}")
    finally:
        proc.kill()
        proc.stdout.close()
        proc.wait()


@dataclass
class RepoStream:
    """Bytes made as they are sent (a zip, a big file): `write(repo, out)` runs on a thread
    of its own with its own repository handle (pygit2 objects are never shared between
    threads), so the session's lane is free meanwhile; at most `ZIP_AHEAD` chunks wait for a
    slow client, so memory does not follow the size."""

    path: Path
    write: Callable[[pygit2.Repository, _Pipe], None]
    name: str = ""

    async def chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        slots = threading.Semaphore(ZIP_AHEAD)
        stop = threading.Event()

        def hand(item: bytes | BaseException | None) -> None:
            while not slots.acquire(timeout=0.5):
                if stop.is_set():
                    raise _Stopped
            loop.call_soon_threadsafe(ready.put_nowait, item)

        def produce() -> None:
            with _STREAMS:  # downloads at once in this process: memory is per stream
                if not stop.is_set():  # its client may have gone while it waited
                    self._produce(hand)

        threading.Thread(target=produce, name="braid-stream", daemon=True).start()
        try:
            while True:
                item = await ready.get()
                slots.release()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise BraidError("the download could not be made") from item
                yield item
        finally:
            stop.set()  # a client that went away: the thread ends at its next chunk

    def _produce(self, hand: Callable[[bytes | BaseException | None], None]) -> None:
        """On the stream's thread: the bytes, then None (the end) or the error."""
        try:
            repo = pygit2.Repository(str(self.path))
            try:
                out = _Pipe(hand)
                self.write(repo, out)
                out.flush()
            finally:
                repo.free()
            hand(None)
        except _Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - re-raised on the loop
            log.exception("streaming from %s failed", self.path.name)
            try:
                hand(e)
            except (_Stopped, RuntimeError):
                pass


class _Stopped(Exception):
    pass


# -- the core calls -----------------------------------------------------------------------


async def list_files(braid: Services, user_id: str, session_id: str, ref: str | None = None,
                     path: str = "") -> PathRead:
    """A folder of the workdir at `ref` (none: HEAD); `ref` and `path` as `ref_param` and
    `path_param` passed them."""
    handle = braid.store.get_owned(user_id, session_id)
    ref_s, path_s = ref, path
    got = await handle.call(lambda git: read_path(git, ref_s, path_s))
    if got["type"] != "dir":
        raise BadRequest(f"{path_s} is a file, not a folder")
    return got


async def get_path(braid: Services, user_id: str, session_id: str, ref: str | None = None,
                   path: str = "") -> PathRead:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: read_path(git, ref, path))


async def get_zip(braid: Services, user_id: str, session_id: str,
                  ref: str | None = None) -> RepoStream:
    """The workdir at `ref` as a zip stream: only the ref is resolved in the session's lane;
    the zip is read and sent after (`RepoStream`)."""
    handle = braid.store.get_owned(user_id, session_id)

    def target(git: GitSession) -> tuple[str, str]:
        commit, name = resolve(git, ref)
        return str(commit.id), name

    commit_id, name = await handle.call(target)
    download = download_name(str(handle.meta.get("title") or ""), name)
    return RepoStream(handle.path, lambda repo, out: write_zip(repo, commit_id, out), download)


def _slug(text: str) -> str:
    # Accents dropped ("é" is "e"), then anything but ASCII letters and digits is a dash.
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")[:60].strip("-")


def download_name(title: str, ref: str) -> str:
    """A zip's file name as people read it: the session's title, then the branch in words
    ("notes-sub-agent-red.zip", "notes-another-version.zip") or a commit by its short id."""
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        where = f"at-{ref[:7]}"
    elif is_run(ref):
        where = "another-version"
    else:
        where = _slug(branch_words(ref)) or "workdir"
    return f"{_slug(title) or 'session'}-{where}.zip"
