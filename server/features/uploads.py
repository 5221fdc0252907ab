"""Uploads (DESIGN §4 "Boundaries", §5 `POST /api/sessions/{id}/files`): a multipart body
streamed into a staging folder of the session, then moved into `workdir/` whole as one
`user-edit` commit owned by an upload run.

- *Streamed.* The body is parsed as it arrives (python-multipart's push parser): each file
  part goes straight to its own file in `.git/braid-uploads/<token>/` (same file system as
  `workdir/`, never seen by git), so memory stays flat whatever the size. Bytes and files are
  counted as they arrive against `BRAID_IMPORT_MAX_BYTES` / `_FILES`: past either, `TooLarge`
  (413) and the staging folder is removed.
- *Names at the door.* Every name (joined with `dir`) passes `files.path_param` and the one
  name rule (`names.check_path`) before anything enters `workdir/`; a refused name is
  `bad_request` / `forbidden` and nothing is kept.
- *Whole or nothing.* Under the session's lock: the user's own edits are snapshotted, an
  intent record (journal.py) names every path, the staged files are renamed in through
  directory handles (no symlink followed), the `user-edit` commit is made, the record goes.
  A kill in between is settled at start-up (`journal.recover`: committed → kept, else every
  path put back as HEAD has it), and staging folders left by a dead server are removed
  (`remove_staging`). A retry then works as the first try would have.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import shutil
import stat
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from python_multipart.multipart import MultipartParser, parse_options_header

from server.agent.turn_changes import files_of
from server.base import crash, events, names
from server.base.errors import BadRequest, BraidError, Conflict, Forbidden, TooLarge
from server.base.ids import new_message_id, now_iso
from server.base.records import MessageRecord, new_run, to_json_bytes
from server.base.results import UploadMade, UploadResult
from server.features.files import path_param
from server.git.session import Change, GitSession
from server.git.workdir.scan import WORKDIR
from server.git.workdir.staging import DISK
from server.store import journal, layout
from server.store.locks import hold_shown, on_branch
from server.store.search import run_rows

if TYPE_CHECKING:
    from server.agent.services import Services

STAGING = "braid-uploads"  # under .git: bodies being received
MAX_FIELDS = 50  # non-file fields of one body (only `dir` is read)
MAX_FIELD = 4096  # bytes of one such field
FLUSH = 1 << 20  # bytes gathered before the parser runs on a worker thread
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Received:
    """What a body held: staged file `f{i}` is `names[i]` (workdir-relative, before `dir`)."""

    folder: Path
    names: list[str] = field(default_factory=list)
    folder_param: str = ""
    size: int = 0

    def targets(self) -> dict[str, str]:
        """Workdir-relative path → staged file name, each checked (a later part of the same
        name wins, as it would on disk)."""
        base = path_param(self.folder_param)
        out: dict[str, str] = {}
        for i, name in enumerate(self.names):
            rel = f"{base}/{name}" if base else name
            out[path_param(names.check_path(rel), required=True)] = f"f{i}"
        if not out:
            raise BadRequest("no file to upload")
        for rel in out:
            parts = rel.split("/")
            clash = next((p for i in range(1, len(parts))
                          if (p := "/".join(parts[:i])) in out), None)
            if clash is not None:
                raise BadRequest(f"{clash} is both a file and a folder of this upload")
        return out


class Receiver:
    """A multipart body fed chunk by chunk: file parts written to `received.folder`."""

    def __init__(self, received: Received, boundary: bytes, max_bytes: int,
                 max_files: int) -> None:
        self.received = received
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.fields = 0
        self._header: list[bytes] = [b"", b""]
        self._disposition = b""
        self._out: int | None = None  # the open staged file
        self._field: bytearray | None = None  # the `dir` field being read
        self._field_name: bytes | None = None
        self._sink: Callable[[bytes], None] | None = None
        self.ended = False
        self.parser = MultipartParser(boundary, {
            "on_part_begin": self._begin, "on_header_field": self._hfield,
            "on_header_value": self._hvalue, "on_header_end": self._hend,
            "on_headers_finished": self._headers_done, "on_part_data": self._data,
            "on_part_end": self._end, "on_end": self._done})

    # -- parser callbacks -------------------------------------------------------------

    def _begin(self) -> None:
        self._disposition = b""
        self._header = [b"", b""]

    def _hfield(self, data: bytes, start: int, end: int) -> None:
        self._header[0] += data[start:end]

    def _hvalue(self, data: bytes, start: int, end: int) -> None:
        self._header[1] += data[start:end]

    def _hend(self) -> None:
        if self._header[0].strip().lower() == b"content-disposition":
            self._disposition = self._header[1]
        self._header = [b"", b""]

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._disposition)
        name, filename = options.get(b"name"), options.get(b"filename")
        if name == b"files" and filename is not None:
            self._open_file(filename)
            self._sink = self._file_data
            return
        if name != b"dir":  # another field: counted, bounded, dropped
            self.fields += 1
            if self.fields > MAX_FIELDS:
                raise BadRequest(f"at most {MAX_FIELDS} fields besides the files")
        self._field = bytearray()
        self._field_name = name
        self._sink = self._field_data

    def _open_file(self, raw: bytes) -> None:
        try:
            filename = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRequest("a file name is not valid UTF-8") from e
        # Refused before one byte of it is written anywhere.
        names.check_path(path_param(filename, required=True))
        got = self.received
        if len(got.names) >= self.max_files:
            raise TooLarge(f"an upload holds at most {self.max_files} files",
                           {"max_files": self.max_files})
        self._out = os.open(got.folder / f"f{len(got.names)}", os.O_WRONLY | os.O_CREAT
                            | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        got.names.append(filename)

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._sink is not None:
            self._sink(data[start:end])

    def _file_data(self, chunk: bytes) -> None:
        got = self.received
        got.size += len(chunk)
        if got.size > self.max_bytes:
            raise TooLarge(f"an upload holds at most {self.max_bytes} bytes",
                           {"max_bytes": self.max_bytes})
        assert self._out is not None
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._out, view):]

    def _field_data(self, chunk: bytes) -> None:
        assert self._field is not None
        self._field += chunk
        if len(self._field) > MAX_FIELD:
            raise BadRequest(f"a field holds at most {MAX_FIELD} bytes")

    def _end(self) -> None:
        self.close()
        if self._field is not None and self._field_name == b"dir":
            try:
                self.received.folder_param = self._field.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadRequest("dir is not valid UTF-8") from e
        self._field = None
        self._sink = None

    def _done(self) -> None:
        self.ended = True

    # -- feeding ----------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        try:
            self.parser.write(data)
        except (BraidError, OSError):
            raise
        except Exception as e:  # noqa: BLE001 - python-multipart's errors: the client's input
            raise BadRequest(f"malformed upload: {e}") from e

    def close(self) -> None:
        if self._out is not None:
            os.close(self._out)
            self._out = None


# -- receiving ----------------------------------------------------------------------------


def boundary_of(content_type: str) -> bytes:
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise BadRequest("an upload is a multipart/form-data body with `files` parts")
    return boundary


def staging_root(session_path: Path) -> Path:
    return session_path / ".git" / STAGING


def remove_staging(session_path: Path) -> bool:
    """At start-up (no upload is live then): what a dead server was receiving."""
    root = staging_root(session_path)
    if not root.exists():
        return False
    shutil.rmtree(root, ignore_errors=True)
    return True


async def receive(body: AsyncIterator[bytes], folder: Path, boundary: bytes, max_bytes: int,
                  max_files: int) -> Received:
    """Parse the body into `folder` as it arrives; the parsing and writing run on a worker
    thread a megabyte at a time, so the loop is never blocked by the disk."""
    received = Received(folder)
    receiver = Receiver(received, boundary, max_bytes, max_files)
    pending: list[bytes] = []
    size = 0
    try:
        async for chunk in body:
            pending.append(chunk)
            size += len(chunk)
            if size >= FLUSH:
                data, pending, size = b"".join(pending), [], 0
                await asyncio.to_thread(receiver.feed, data)
        if pending:
            await asyncio.to_thread(receiver.feed, b"".join(pending))
    finally:
        receiver.close()
    if not receiver.ended:
        raise BadRequest("the upload was cut short (no closing boundary)")
    return received


# -- entering workdir/ --------------------------------------------------------------------


def confined(git: GitSession, rel: str) -> None:
    """No folder on the way is a symlink, and no file stands where a folder must go."""
    here = git.path / WORKDIR
    for part in rel.split("/")[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise Forbidden(f"{rel}: a folder on the way is a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise Conflict(f"{rel}: a file stands where a folder must go")
    target = git.path / WORKDIR / rel
    if target.is_dir() and not target.is_symlink():
        raise Conflict(f"{rel} is a folder")


def _parent_fd(root: Path, rel: str) -> int:
    """The folder holding `root/rel`, opened component by component without following a
    symlink (made when missing)."""
    fd = os.open(root, _DIR_FLAGS)
    for part in rel.split("/")[:-1]:
        try:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Forbidden(f"{rel}: {part} is a symlink or a file") from e
            raise
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _move_in(git: GitSession, folder: Path, targets: dict[str, str]) -> None:
    src = os.open(folder, _DIR_FLAGS)
    try:
        for n, rel in enumerate(sorted(targets)):
            fd = _parent_fd(git.path, f"{WORKDIR}/{rel}")
            try:
                os.replace(targets[rel], rel.rsplit("/", 1)[-1], src_dir_fd=src,
                           dst_dir_fd=fd)
            finally:
                os.close(fd)
            if n == 0:
                crash.at("upload.mid_rename")
    finally:
        os.close(src)


def commit_upload(git: GitSession, session_id: str, folder: Path,
                  targets: dict[str, str]) -> UploadMade:
    """On the session thread, holding the branch: the staged files enter workdir/ whole
    with one `user-edit` commit, an upload run record and the message the transcript (and
    the model) reads."""
    import pygit2

    from server.agent.turn_context import snapshot_user_edits

    for rel in targets:
        confined(git, rel)
    snapshot_user_edits(git)  # edits made on disk before stay the user's own commit
    run_id = new_message_id()
    listed = sorted(targets)
    shown = ", ".join(listed[:8]) + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")
    now = now_iso()
    message: MessageRecord = {
        "id": new_message_id(), "role": "user", "run_id": run_id, "created_at": now,
        "content": f"I uploaded {len(listed)} file{'s' if len(listed) != 1 else ''} "
                   f"into the workdir: {shown}", "upload": listed}
    run = new_run(run_id, session_id, git.branch, status="COMPLETED", created_at=now,
                  message_count=1)
    run["kind"] = "upload"
    paths = [f"{WORKDIR}/{rel}" for rel in listed]
    try:
        with journal.intent(git, "upload", paths, kind="user-edit"):
            crash.at("upload.after_intent")
            _move_in(git, folder, targets)
            crash.at("upload.after_renames")
            changes: dict[str, Change] = {p: DISK for p in paths}
            changes[layout.next_message_path(git, "user", message["id"])] = \
                to_json_bytes(message)
            changes[layout.new_run_path(git, run_id)] = to_json_bytes(run)
            commit_id = git.write_checkpoint(changes, summary=f"Upload: {shown}"[:200],
                                             kind="user-edit", run_id=run_id,
                                             message_index=1)
            crash.at("upload.after_commit")
    except pygit2.GitError as e:  # rolled back by the intent: the client's input
        raise BadRequest(f"git refused the upload: {e}") from e
    return {"run_id": run_id, "run": run, "messages": [message], "paths": listed,
            "commit_id": str(commit_id)}


async def upload(braid: Services, user_id: str, session_id: str, body: AsyncIterator[bytes],
                 content_type: str) -> UploadResult:
    """Stream a multipart body into the session's staging folder, then put its files into
    workdir/ (under its `dir` field) as one revertable `user-edit` commit."""
    handle = braid.store.get_owned(user_id, session_id)
    boundary = boundary_of(content_type)
    settings = braid.settings
    root = staging_root(handle.path)
    if root.is_symlink():  # only Braid makes it: never written through a link
        root.unlink()
    root.mkdir(exist_ok=True)
    folder = root / secrets.token_hex(8)
    folder.mkdir()
    try:
        received = await receive(body, folder, boundary, settings.import_max_bytes,
                                 settings.import_max_files)
        crash.at("upload.after_temp")
        targets = received.targets()
        async with hold_shown(braid.locks, handle) as branch:  # no turn may run meanwhile
            made = await handle.call(on_branch(branch, lambda git: commit_upload(
                git, handle.session_id, folder, targets)))
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)
    await braid.search.add(run_rows(handle.session_id, made["run_id"], made["messages"]))
    await braid.index.upsert_run(handle.session_id, made["run"])
    # Its chips go out with the event, read once rather than by every tab.
    files = await handle.call(
        lambda git: files_of(git, made["run_id"], made["run"].get("branch")))
    braid.bus.publish(handle.session_id, events.files_uploaded(
        made["run_id"], made["run"], made["messages"], made["paths"], made["commit_id"], files))
    braid.bus.publish(handle.session_id, events.dag_changed(run_id=made["run_id"]))
    return {"run_id": made["run_id"], "commit_id": made["commit_id"], "paths": made["paths"]}
