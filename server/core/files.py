"""The workdir as the file panel sees it (DESIGN §5 `list_files`, GET files, workdir.zip):
a folder's entries or a file's bytes at a ref (a branch or a commit, default HEAD), the whole
workdir of a commit as a zip, and uploads, each one `user-edit` commit owned by an upload run,
so it shows in the transcript and reverts like any turn.

Everything reads committed trees (what a ref holds), never the files on disk, except an upload,
which writes into `workdir/` without following any symlinked folder."""

from __future__ import annotations

import io
import os
import re
import stat
import zipfile
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import FileMode

from . import layout
from .errors import BadRequest, Busy, Conflict, Forbidden, NotFound
from .git_session import WORKDIR, GitSession, to_json_bytes
from .ids import new_message_id, now_iso
from .turn_changes import files_of

if TYPE_CHECKING:
    from .braid import Braid

UPLOAD_MAX_FILE = 10 * 1024 * 1024
UPLOAD_MAX_TOTAL = 50 * 1024 * 1024
UPLOAD_MAX_FILES = 200
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
    try:
        return commit.tree[rel]
    except KeyError:
        return None


def _entries(tree: pygit2.Tree, path: str) -> list[dict[str, Any]]:
    out = []
    for entry in tree:
        rel = f"{path}/{entry.name}" if path else entry.name
        if isinstance(entry, pygit2.Tree):
            out.append({"path": rel, "type": "dir", "size": None})
        else:
            out.append({"path": rel, "type": "file", "size": entry.size})
    out.sort(key=lambda e: (e["type"] != "dir", e["path"].lower()))
    return out


def read_path(git: GitSession, ref: str | None, path: str) -> dict[str, Any]:
    """{ref, commit_id, path, type, entries | data}: a folder's entries or a file's bytes."""
    commit, name = resolve(git, ref)
    node = _node(commit, path)
    base = {"ref": name, "commit_id": str(commit.id), "path": path}
    if node is None:
        if not path:  # a session without files yet
            return {**base, "type": "dir", "entries": []}
        raise NotFound(f"no file or folder {path} at {name}")
    if isinstance(node, pygit2.Tree):
        return {**base, "type": "dir", "entries": _entries(node, path)}
    blob = git.repo[node.id]
    return {**base, "type": "file", "size": blob.size, "data": blob.data,
            "mode": int(node.filemode)}


def workdir_zip(git: GitSession, ref: str | None) -> tuple[bytes, str]:
    """The whole workdir of a commit as a zip (paths relative to workdir/, modes kept)."""
    commit, name = resolve(git, ref)
    buf = io.BytesIO()
    root = _node(commit, "")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if isinstance(root, pygit2.Tree):
            _zip_tree(git, zf, root, "")
    return buf.getvalue(), name


def _zip_tree(git: GitSession, zf: zipfile.ZipFile, tree: pygit2.Tree, prefix: str) -> None:
    for entry in tree:
        rel = f"{prefix}{entry.name}"
        if isinstance(entry, pygit2.Tree):
            _zip_tree(git, zf, entry, rel + "/")
            continue
        info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
        mode = int(entry.filemode)
        kind = stat.S_IFLNK if mode == FileMode.LINK else stat.S_IFREG
        perm = 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644
        info.external_attr = (kind | perm) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, git.repo[entry.id].data)


# -- the core calls -----------------------------------------------------------------------


async def list_files(braid: Braid, user_id: str, session_id: str, ref: str | None = None,
                     path: str = "") -> dict[str, Any]:
    """A folder of the workdir at `ref` (none: HEAD); `ref` and `path` as `ref_param` and
    `path_param` passed them."""
    handle = braid.store.get_owned(user_id, session_id)
    ref_s, path_s = ref, path
    got = await handle.call(lambda git: read_path(git, ref_s, path_s))
    if got["type"] != "dir":
        raise BadRequest(f"{path_s} is a file, not a folder")
    return got


async def get_path(braid: Braid, user_id: str, session_id: str, ref: str | None = None,
                   path: str = "") -> dict[str, Any]:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: read_path(git, ref, path))


async def get_zip(braid: Braid, user_id: str, session_id: str,
                  ref: str | None = None) -> tuple[bytes, str]:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: workdir_zip(git, ref))


# -- uploads ------------------------------------------------------------------------------


def check_uploads(files: list[tuple[object, bytes]], folder: object) -> dict[str, bytes]:
    """Workdir-relative path → bytes, each path checked and confined to the workdir."""
    base = path_param(folder)
    if not files:
        raise BadRequest("no file to upload")
    if len(files) > UPLOAD_MAX_FILES:
        raise BadRequest(f"at most {UPLOAD_MAX_FILES} files per upload")
    out: dict[str, bytes] = {}
    total = 0
    for name, data in files:
        rel = path_param(name, required=True)
        rel = f"{base}/{rel}" if base else rel
        if len(data) > UPLOAD_MAX_FILE:
            raise BadRequest(f"{rel} is larger than {UPLOAD_MAX_FILE // (1024 * 1024)} MB")
        total += len(data)
        out[rel] = data
    if total > UPLOAD_MAX_TOTAL:
        raise BadRequest(f"an upload holds at most {UPLOAD_MAX_TOTAL // (1024 * 1024)} MB")
    return out


def _confined(git: GitSession, rel: str) -> None:
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


def commit_upload(git: GitSession, session_id: str, files: dict[str, bytes]) -> dict[str, Any]:
    """On the session thread: one `user-edit` commit holding the files, an upload run record
    and the message the transcript (and the model) reads."""
    from .turns import snapshot_user_edits

    for rel in files:
        _confined(git, rel)
    snapshot_user_edits(git)  # edits made on disk before stay the user's own commit
    run_id = new_message_id()
    names = sorted(files)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    now = now_iso()
    message = {"id": new_message_id(), "role": "user", "run_id": run_id, "created_at": now,
               "content": f"I uploaded {len(names)} file{'s' if len(names) != 1 else ''} "
                          f"into the workdir: {shown}", "upload": names}
    run = {"run_id": run_id, "session_id": session_id, "status": "COMPLETED", "kind": "upload",
           "branch": git.branch, "model": None, "usage": {}, "created_at": now,
           "updated_at": now, "forked_from_run_id": None, "forked_from_message_index": None,
           "regenerated_from": None, "error": None, "message_count": 1, "parent_run_id": None}
    changes: dict[str, Any] = {f"{WORKDIR}/{rel}": data for rel, data in files.items()}
    changes[layout.next_message_path(git, "user", message["id"])] = to_json_bytes(message)
    changes[layout.new_run_path(git, run_id)] = to_json_bytes(run)
    commit_id = git.write_checkpoint(changes, summary=f"Upload: {shown}"[:200],
                                     kind="user-edit", run_id=run_id, message_index=1)
    return {"run_id": run_id, "run": run, "messages": [message], "paths": names,
            "commit_id": str(commit_id)}


def _chips(git: GitSession, made: dict[str, Any]) -> list[dict[str, str]]:
    return files_of(git, made["run_id"], made["run"].get("branch"))


async def upload(braid: Braid, user_id: str, session_id: str,
                 files: list[tuple[object, bytes]], folder: object = None) -> dict[str, Any]:
    """Put files into workdir/ (into `folder`) as one revertable `user-edit` commit."""
    handle = braid.store.get_owned(user_id, session_id)
    checked = check_uploads(files, folder)
    branch = await handle.call(lambda git: git.branch)

    def work(git: GitSession) -> dict[str, Any]:
        if git.branch != branch:
            raise Busy(f"the session switched from branch {branch} to {git.branch}")
        return commit_upload(git, handle.session_id, checked)

    async with braid.locks.hold(handle.session_id, branch):  # no turn may run meanwhile
        made = await handle.call(work)
    await braid.index.upsert_run(handle.session_id, made["run"])
    # Its chips go out with the event, read once rather than by every tab.
    made["files"] = await handle.call(lambda git: _chips(git, made))
    braid.bus.publish(handle.session_id, "files_uploaded", made)
    braid.bus.publish(handle.session_id, "dag_changed", {"run_id": made["run_id"]})
    return {"run_id": made["run_id"], "commit_id": made["commit_id"], "paths": made["paths"]}
