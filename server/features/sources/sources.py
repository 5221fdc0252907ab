"""Where an import comes from (DESIGN §4 "Import and export", "Boundaries"): a folder or a git
repository, checked against the caller's roots (roots.py), and the snapshot of its files
written into a session repository as blobs and trees (no index, no `git add`).

A folder's files are the ones `git ls-files --others --cached --exclude-standard` lists there
(git itself lists them, through gitsafe so the folder's repository runs none of its own code;
nested .gitignore files, negations and the global excludes mean what they mean to git), minus
a top-level `.braidignore`'s patterns, symlinks and files over BRAID_IMPORT_MAX_FILE, Braid's
data dir and nested repositories (both listed in `skipped`). A git source's files are its
tree at a ref, read from its object database; nothing is checked out."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pygit2
from pygit2.enums import FileMode, RepositoryOpenFlag

from server.base.budget import Budget
from server.base.errors import BadRequest
from server.base.names import skipped_entry
from server.base.records import ImportSummary, SkippedFile, SourceMeta
from server.base.settings import Settings
from server.features.roots import Roots
from server.features.sources.git_urls import FETCH_FAILED, clone_plan, parse_url
from server.git.packwriter import PackWriter
from server.git.safe import RepoDirs, find_repo, run_git
from server.git.trees import Entry, apply_changes, walk

BRAIDIGNORE = ".braidignore"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")  # user@host:path, as git clone reads it
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

    def meta(self, base_commit: str | None) -> SourceMeta:
        out: SourceMeta = {"kind": self.kind, "path_or_url": self.path_or_url}
        if self.kind == "git":
            out["ref"] = self.ref
        if self.kind == "git" or base_commit:
            out["base_commit"] = base_commit
        return out

    @classmethod
    def from_meta(cls, meta: SourceMeta) -> Source:
        kind, where = meta.get("kind"), str(meta.get("path_or_url") or "")
        local = None if kind == "git" and is_url(where) else Path(where)
        return cls(str(kind), where, meta.get("ref"), local)


@dataclass
class Snapshot:
    """A source's files as a tree in the destination repository."""

    tree: pygit2.Oid | None  # None: no file at all
    files: int = 0
    bytes: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    base_commit: str | None = None

    def summary(self) -> ImportSummary:
        return {"files": self.files, "bytes": self.bytes, "skipped": self.skipped[:200],
                "skipped_count": len(self.skipped)}


def is_url(value: str) -> bool:
    return bool(_URL.match(value) or _SCP.match(value))


def allowed_path(roots: Roots, raw: str, *, export: bool = False) -> Path:
    """The real path behind `raw` if it lies in the caller's roots and not in the data dir
    (for an export: nor holds it), else `forbidden` (roots.py)."""
    return roots.allowed(raw, export=export)


def _existing_folder(path: Path, raw: str) -> Path:
    if not path.exists():
        raise BadRequest(f"no such folder: {raw}")
    if not path.is_dir():
        raise BadRequest(f"{raw} is a file, not a folder")
    return path


def resolve_source(settings: Settings, roots: Roots, asked: SourceRequest) -> Source:
    """The source a client asked for, checked (roots, existence, a URL's form and scheme)
    but not read. A URL's host is checked when it is cloned (git_urls.clone_plan)."""
    where, ref = asked.where, asked.ref
    if asked.kind == "folder":
        folder = _existing_folder(allowed_path(roots, where), where)
        return Source("folder", str(folder), local=folder)
    if where.lower().startswith("file:"):  # a local path: through the roots, never a URL
        where = unquote(urlparse(where).path)
    if is_url(where):
        parse_url(settings, where)
        return Source("git", where, ref)
    repo_dir = _existing_folder(allowed_path(roots, where), where)
    return Source("git", str(repo_dir), ref, repo_dir)


# -- listing a folder ---------------------------------------------------------------------


@dataclass
class Listing:
    """A folder's files to import, what was left out of it, and its repository's HEAD."""

    files: list[str]
    skipped: list[SkippedFile]
    head: str | None


def folder_head(folder: Path, dirs: RepoDirs | None) -> str | None:
    """The HEAD commit of the repository whose work tree is exactly `folder`, if any: the
    base a folder import's export to a branch starts from. Read by libgit2 (no git runs)."""
    if dirs is None or dirs.work_tree != folder:
        return None
    try:
        repo = pygit2.Repository(str(dirs.git_dir), RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError:
        return None
    try:
        return None if repo.head_is_unborn else str(repo.head.peel(pygit2.Commit).id)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    finally:
        repo.free()  # its files now, not when the collector comes by


def list_folder(folder: Path, roots: Roots) -> Listing:
    """The folder's files as `git ls-files --others --cached --exclude-standard` lists them
    (with the repository named explicitly, after `gitsafe.find_repo` checked it; through a
    throwaway git dir when the folder is in none), git made harmless (gitsafe.run_git).
    Left out, and said so: Braid's data dir inside the folder, nested repositories."""
    dirs = find_repo(folder, roots, str(folder))
    skipped: list[SkippedFile] = []
    pathspec = ["--", "."]
    inner = roots.data_dir_in(folder)
    if inner is not None:
        pathspec.append(f":(exclude,literal){inner}")
        skipped.append({**skipped_entry(f"{inner}/", "Braid's data folder: never imported"),
                        "size": 0})
    with tempfile.TemporaryDirectory(prefix="braid-ls-") as tmp:
        if dirs is not None and dirs.work_tree is not None:
            cmd = [f"--git-dir={dirs.git_dir}", f"--work-tree={dirs.work_tree}"]
        else:
            run_git(["init", "-q", "--bare", "--template=", tmp])
            cmd = [f"--git-dir={tmp}", f"--work-tree={folder}"]
        cmd += ["-C", str(folder), "ls-files", "-z", "--others", "--cached", "--exclude-standard"]
        if (folder / BRAIDIGNORE).is_file():
            cmd.append(f"--exclude-from={folder / BRAIDIGNORE}")
        out = run_git(cmd + pathspec)
    if out.returncode != 0:
        last = out.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise BadRequest(f"could not list {folder}: {last[0] if last else 'git failed'}")
    names = sorted({n.decode("utf-8", "surrogateescape") for n in out.stdout.split(b"\0") if n})
    # An untracked nested repository is listed as "dir/": not a file of this folder.
    skipped += [{**skipped_entry(n, "a nested git repository"), "size": 0}
                for n in names if n.endswith("/")]
    return Listing([n for n in names if not n.endswith("/")], skipped,
                   folder_head(folder, dirs))


# -- writing a snapshot -------------------------------------------------------------------


class TreeWriter:
    """Collects (path, blob, mode) and writes the nested trees once, bottom up."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.files: dict[str, Entry | None] = {}

    def add(self, rel: str, oid: pygit2.Oid, mode: int) -> None:
        self.files[rel] = (oid, mode)

    def write(self) -> pygit2.Oid | None:
        tree = apply_changes(self.repo, None, self.files)
        return tree.id if tree is not None else None


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
                    workdir: Path | None = None, budget: Budget | None = None, *,
                    roots: Roots) -> Snapshot:
    """The folder's files as blobs and trees in `repo` (and copied into `workdir`), or
    TooLarge once they pass `budget` (the caller drops what was made)."""
    trees = TreeWriter(repo)
    listing = list_folder(folder, roots)
    snap = Snapshot(tree=None, base_commit=listing.head, skipped=listing.skipped)
    files = Files(workdir)
    budget = budget or Budget()
    with PackWriter(repo) as pack:
        for rel in listing.files:
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
        for rel, entry in walk(commit.tree, on_folder=budget.folder):
            mode = entry.filemode
            # (an entry with a file's mode is a Blob: the isinstance only tells the checker)
            if mode not in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE) or \
                    not isinstance(entry, pygit2.Blob):
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
    """A git source opened for reading: a local repository as it is (after `find_repo`
    checked where its `.git` file, commondir and alternates lead), a URL as a bare clone in
    a temporary folder that `close()` removes (after git_urls checked its scheme and host)."""

    def __init__(self, source: Source, settings: Settings, roots: Roots) -> None:
        self._tmp: Path | None = None
        if source.local is not None:
            dirs = find_repo(source.local, roots, source.path_or_url)
            try:
                if dirs is None:
                    raise pygit2.GitError("no repository")
                self.repo = pygit2.Repository(str(dirs.git_dir), RepositoryOpenFlag.NO_SEARCH)
            except pygit2.GitError as e:
                raise BadRequest(f"{source.path_or_url} is not a git repository") from e
            return
        remote = parse_url(settings, source.path_or_url)
        url, config = clone_plan(settings, remote)
        tmp_root = settings.data_dir / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix="clone-", dir=tmp_root))
        try:
            out = run_git(["clone", "--bare", "--quiet", "--template=", "--", url,
                           str(self._tmp / "repo.git")], timeout=CLONE_TIMEOUT,
                          config=config, allow_protocols=remote.scheme)
        except subprocess.TimeoutExpired:
            out = None
        if out is None or out.returncode != 0:
            self.close()
            raise BadRequest(FETCH_FAILED)  # never what the other end answered
        self.repo = pygit2.Repository(str(self._tmp / "repo.git"))

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
