"""Where an import comes from (DESIGN §4 "Import and export"): a folder or a git repository,
checked against BRAID_IMPORT_ROOTS, and the snapshot of its files written into a session
repository as blobs and trees (no index, no `git add`).

A folder's files are the ones `git ls-files --others --cached --exclude-standard` lists there
(git itself lists them, so nested .gitignore files, negations and the global excludes mean
what they mean to git), minus a top-level `.braidignore`'s patterns, symlinks and files over
BRAID_IMPORT_MAX_FILE. A git source's files are its tree at a ref, read from its object
database; nothing is checked out."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pygit2
from pygit2.enums import FileMode

from .budget import Budget
from .errors import BadRequest, Forbidden
from .packwriter import PackWriter
from .settings import Settings

BRAIDIGNORE = ".braidignore"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")  # user@host:path, as git clone reads it
# Transports a clone may use: never ext:: (it runs commands) or fd::.
ALLOWED_PROTOCOLS = "http:https:ssh:git:file"
CLONE_TIMEOUT = 600


@dataclass(frozen=True)
class SourceRequest:
    """What a client asked to import (parsed by the transport): a folder, or a repository
    (a local path or a URL) at an optional ref. `resolve_source` checks it against the
    roots and the disk."""

    kind: str  # "folder" | "git"
    where: str
    ref: str | None = None


@dataclass
class Source:
    kind: str  # "folder" | "git"
    path_or_url: str
    ref: str | None = None
    local: Path | None = None  # the folder, or a local repository (None for a remote URL)

    def meta(self, base_commit: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "path_or_url": self.path_or_url}
        if self.kind == "git":
            out["ref"] = self.ref
        if self.kind == "git" or base_commit:
            out["base_commit"] = base_commit
        return out

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Source:
        kind, where = meta.get("kind"), str(meta.get("path_or_url") or "")
        local = None if kind == "git" and is_url(where) else Path(where)
        return cls(str(kind), where, meta.get("ref"), local)


@dataclass
class Snapshot:
    """A source's files as a tree in the destination repository."""

    tree: pygit2.Oid | None  # None: no file at all
    files: int = 0
    bytes: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    base_commit: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "skipped": self.skipped[:200],
                "skipped_count": len(self.skipped)}


def is_url(value: str) -> bool:
    return bool(_URL.match(value) or _SCP.match(value))


def allowed_path(settings: Settings, raw: str) -> Path:
    """The real path behind `raw` if it lies under one of BRAID_IMPORT_ROOTS, else
    `forbidden`. Checked before existence, so nothing outside the roots is revealed."""
    given = Path(raw).expanduser()
    if not given.is_absolute():
        raise BadRequest(f"{raw} is not an absolute path")
    path = Path(os.path.realpath(given))
    for root in settings.import_roots:
        real_root = os.path.realpath(root.expanduser())
        if os.path.commonpath([real_root, str(path)]) == real_root:
            return path
    raise Forbidden(f"{raw} is outside the folders imports may come from (BRAID_IMPORT_ROOTS)")


def _existing_folder(path: Path, raw: str) -> Path:
    if not path.exists():
        raise BadRequest(f"no such folder: {raw}")
    if not path.is_dir():
        raise BadRequest(f"{raw} is a file, not a folder")
    return path


def resolve_source(settings: Settings, asked: SourceRequest) -> Source:
    """The source a client asked for, checked (roots, existence) but not read."""
    where, ref = asked.where, asked.ref
    if asked.kind == "folder":
        folder = _existing_folder(allowed_path(settings, where), where)
        return Source("folder", str(folder), local=folder)
    if where.startswith("file://"):
        where = unquote(urlparse(where).path)
    if is_url(where):
        return Source("git", where, ref)
    repo_dir = _existing_folder(allowed_path(settings, where), where)
    return Source("git", str(repo_dir), ref, repo_dir)


# -- listing a folder ---------------------------------------------------------------------


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS, LC_ALL="C")
    return env


def _git(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], capture_output=True, env=_git_env(),
                          timeout=timeout, check=False)


def folder_head(folder: Path) -> str | None:
    """The HEAD commit of the repository whose work tree is exactly `folder`, if any: the
    base a folder import's export to a branch starts from."""
    top = _git(["-C", str(folder), "rev-parse", "--show-toplevel"])
    if top.returncode != 0 or Path(top.stdout.decode().strip()) != folder:
        return None
    head = _git(["-C", str(folder), "rev-parse", "--verify", "-q", "HEAD^{commit}"])
    return head.stdout.decode().strip() or None if head.returncode == 0 else None


def list_folder(folder: Path) -> list[str]:
    """The folder's files as `git ls-files --others --cached --exclude-standard` lists them
    (through a throwaway git dir when the folder is not in a repository)."""
    inside = _git(["-C", str(folder), "rev-parse", "--is-inside-work-tree"])
    with tempfile.TemporaryDirectory(prefix="braid-ls-") as tmp:
        if inside.returncode == 0 and inside.stdout.strip() == b"true":
            cmd = ["-C", str(folder)]
        else:
            _git(["init", "-q", "--bare", tmp])
            cmd = [f"--git-dir={tmp}", f"--work-tree={folder}", "-C", str(folder)]
        cmd += ["ls-files", "-z", "--others", "--cached", "--exclude-standard"]
        if (folder / BRAIDIGNORE).is_file():
            cmd.append(f"--exclude-from={folder / BRAIDIGNORE}")
        out = _git(cmd)
    if out.returncode != 0:
        raise BadRequest(f"could not list {folder}: {out.stderr.decode(errors='replace')}")
    names = {n.decode("utf-8", "surrogateescape") for n in out.stdout.split(b"\0") if n}
    # An untracked nested repository is listed as "dir/": it is not a file of this folder.
    return sorted(n for n in names if not n.endswith("/"))


# -- writing a snapshot -------------------------------------------------------------------


class TreeWriter:
    """Collects (path, blob, mode) and writes the nested trees once, bottom up."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.root: dict[str, Any] = {}

    def add(self, rel: str, oid: pygit2.Oid, mode: int) -> None:
        node = self.root
        *dirs, name = rel.split("/")
        for part in dirs:
            node = node.setdefault(part, {})
        node[name] = (oid, mode)

    def write(self) -> pygit2.Oid | None:
        return self._write(self.root) if self.root else None

    def _write(self, node: dict[str, Any]) -> pygit2.Oid:
        builder = self.repo.TreeBuilder()
        for name, child in node.items():
            if isinstance(child, dict):
                builder.insert(name, self._write(child), FileMode.TREE)
            else:
                builder.insert(name, child[0], child[1])
        return builder.write()


class Files:
    """Copies into `workdir` (None: nowhere), making each folder once."""

    def __init__(self, workdir: Path | None) -> None:
        # Plain strings, not Paths: at 100,000 files pathlib's joins cost seconds.
        self.workdir = str(workdir) if workdir is not None else None
        self._made: set[str] = set()

    def put(self, rel: str, data: bytes, executable: bool) -> None:
        if self.workdir is None:
            return
        parent = rel.rpartition("/")[0]
        if parent and parent not in self._made:
            os.makedirs(f"{self.workdir}/{parent}", exist_ok=True)
            self._made.add(parent)
        dest = f"{self.workdir}/{rel}"
        with open(dest, "wb") as f:
            f.write(data)
        if executable:
            os.chmod(dest, 0o755)


def snapshot_folder(repo: pygit2.Repository, folder: Path, max_file: int,
                    workdir: Path | None = None, budget: Budget | None = None) -> Snapshot:
    """The folder's files as blobs and trees in `repo` (and copied into `workdir`), or
    TooLarge once they pass `budget` (the caller drops what was made)."""
    trees = TreeWriter(repo)
    snap = Snapshot(tree=None, base_commit=folder_head(folder))
    files = Files(workdir)
    budget = budget or Budget()
    with PackWriter(repo) as pack:
        for rel in list_folder(folder):
            _copy_one(folder, rel, max_file, pack, trees, files, snap, budget)
    snap.tree = trees.write()  # after the pack is in place: trees name existing blobs
    return snap


def _copy_one(folder: Path, rel: str, max_file: int, pack: PackWriter, trees: TreeWriter,
              files: Files, snap: Snapshot, budget: Budget) -> None:
    """One listed file: skipped with its reason, or counted, packed and copied."""
    full = f"{folder}/{rel}"
    try:
        st = os.lstat(full)
    except OSError:  # listed by the index but gone from disk
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        snap.skipped.append({"path": rel, "size": st.st_size, "reason": "not a file"})
        return
    if st.st_size > max_file:
        snap.skipped.append({"path": rel, "size": st.st_size, "reason": "too large"})
        return
    budget.take(st.st_size)
    with open(full, "rb") as f:
        data = f.read(max_file + 1)  # a file growing meanwhile is read no further
    if len(data) > max_file:
        snap.skipped.append({"path": rel, "size": len(data), "reason": "too large"})
        return
    executable = bool(st.st_mode & 0o100)
    trees.add(rel, pack.add(data), FileMode.BLOB_EXECUTABLE if executable else FileMode.BLOB)
    files.put(rel, data, executable)
    snap.files += 1
    snap.bytes += len(data)


def _walk_tree(tree: pygit2.Tree, budget: Budget, prefix: str = ""
               ) -> Iterator[tuple[str, pygit2.Object]]:
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            budget.folder()
            yield from _walk_tree(entry, budget, f"{prefix}{entry.name}/")
        else:
            yield f"{prefix}{entry.name}", entry


def resolve_commit(src: pygit2.Repository, ref: str | None) -> pygit2.Commit:
    try:
        return src.revparse_single(ref or "HEAD").peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as e:
        raise BadRequest(f"the source has no commit {ref or 'HEAD'!r}") from e


def snapshot_git(repo: pygit2.Repository, src: pygit2.Repository, commit: pygit2.Commit,
                 max_file: int, workdir: Path | None = None, budget: Budget | None = None
                 ) -> Snapshot:
    """`commit`'s tree copied from `src`'s object database into `repo` (and `workdir`), or
    TooLarge once it passes `budget` (the caller drops what was made)."""
    trees = TreeWriter(repo)
    snap = Snapshot(tree=None, base_commit=str(commit.id))
    files = Files(workdir)
    budget = budget or Budget()
    with PackWriter(repo) as pack:
        for rel, entry in _walk_tree(commit.tree, budget):
            mode = entry.filemode
            if mode not in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
                snap.skipped.append({"path": rel, "size": 0, "reason": "not a file"})
                continue
            size = src.odb.read_header(entry.id)[1]  # without inflating it
            if size > max_file:
                snap.skipped.append({"path": rel, "size": size, "reason": "too large"})
                continue
            budget.take(size)
            data = entry.data
            trees.add(rel, pack.add(data), mode)
            files.put(rel, data, mode == FileMode.BLOB_EXECUTABLE)
            snap.files += 1
            snap.bytes += len(data)
    snap.tree = trees.write()
    return snap


# -- opening a git source -----------------------------------------------------------------


class OpenedRepo:
    """A git source opened for reading: a local repository as it is, a URL as a bare clone
    in a temporary folder that `close()` removes."""

    def __init__(self, source: Source, tmp_root: Path) -> None:
        self._tmp: Path | None = None
        if source.local is not None:
            try:
                self.repo = pygit2.Repository(str(source.local))
            except pygit2.GitError as e:
                raise BadRequest(f"{source.path_or_url} is not a git repository") from e
            return
        tmp_root.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix="clone-", dir=tmp_root))
        try:
            out = _git(["clone", "--bare", "--quiet", "--", source.path_or_url,
                        str(self._tmp / "repo.git")], timeout=CLONE_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            self.close()
            raise BadRequest(f"cloning {source.path_or_url} timed out") from e
        if out.returncode != 0:
            self.close()
            message = out.stderr.decode(errors="replace").strip().splitlines()
            raise BadRequest(f"could not clone {source.path_or_url}: "
                             f"{message[-1] if message else 'git clone failed'}")
        self.repo = pygit2.Repository(str(self._tmp / "repo.git"))

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
