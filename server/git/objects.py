"""A checkpoint's trees and commit written from their bytes, and its branch moved by
compare-and-swap (DESIGN "Checkpoints").

libgit2 spends most of a checkpoint around the writes, not in them: each object written
first looks for an older copy (a utime, then a re-scan of `objects/pack/`), is re-read once
or twice after it is written, and a TreeBuilder copies its whole base tree and checks every
entry's object exists. Here a tree is edited as bytes, starting from the bytes of the tree
this session wrote last (`TreeCache`), and each object is a loose object written as git
writes one (git/loose.py). The bytes are git's: entries sorted as git sorts them (a
folder's name compared as if it ended in "/"), modes as git writes them;
tests/git/test_rawobjects.py compares them with `git mktree` and pygit2.

The branch moves the way git moves it: `<ref>.lock` created exclusively (another writer's
lock makes this fail), the current value compared with the expected old tip, the reflog
lines appended (as libgit2 writes them for a commit), the lock put in the ref's place
(`fsops.replace`: atomic, without ext4 writing the data out first). Anything
unusual (an unborn or packed ref, a detached HEAD) is left to libgit2 (`move_branch` answers
False).
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pygit2

from server.base.fsops import replace, sync_dir

T = TypeVar("T")

TREE_MODE = 0o40000
_ENTRY = re.compile(rb"[0-7]+ ([^\0]+)\0.{20}", re.S)
# Names git refuses in a tree ("." and "..", ".git" in its NTFS and HFS+ spellings, "git~1")
# are left to libgit2 to judge; a name that is plain ASCII and cannot be one is taken as it is.
_PLAIN = re.compile(r"[\x20-\x7e]+")
_UNSAFE_START = (".git", "git~")
_SPACE = " \t\n\v\f\r"  # git__isspace
_SPACE_NOT_LF = " \t\v\f\r"
_RUN = re.compile(f"[{re.escape(_SPACE)}]+")


class BranchMoved(RuntimeError):
    """The branch is not at the expected tip, or another writer holds its lock."""


def parse_tree(data: bytes) -> dict[bytes, bytes]:
    """A tree's bytes as {name: the entry's bytes} (`mode name\\0<20-byte id>`): an edit
    replaces entries and joins them again, and makes no tuple per entry (the tuple free
    list would keep them, which a leak check cannot tell from a leak)."""
    return {m[1]: m[0] for m in _ENTRY.finditer(data)}


def tree_entry(mode: int, name: bytes, raw: bytes) -> bytes:
    """One entry's bytes, its mode as git writes it (`40000` for a folder, no leading 0)."""
    return b"%o %s\0%s" % (mode, name, raw)

def folder_in(entries: dict[bytes, bytes] | None, name: bytes, file: T) -> bytes | T | None:
    """The raw id of the folder `name` among a tree's entries: None if absent, `file` if a
    file stands there."""
    entry = entries.get(name) if entries is not None else None
    return None if entry is None else entry_tree(entry) or file


def entry_tree(entry: bytes) -> bytes | None:
    """The raw id of the folder an entry names (None: not a folder)."""
    if entry.startswith(b"40000 ") or (entry.startswith(b"0") and
                                        int(entry[:entry.index(b" ")], 8) == TREE_MODE):
        return entry[-20:]
    return None


def _sort_key(name: bytes, entry: bytes) -> bytes:
    return name + b"/" if entry_tree(entry) else name


def sorted_entries(entries: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The entries in git's order: names compared as bytes, a folder's as if it ended in
    "/" (so `a.txt` < `a/` < `a0`)."""
    return {name: entries[name]
            for name in sorted(entries, key=lambda name: _sort_key(name, entries[name]))}


def encode_tree(entries: dict[bytes, bytes]) -> bytes:
    """A tree's bytes, its entries in git's order."""
    return b"".join(sorted_entries(entries).values())


def nest(entries: Mapping[str, Sequence[Any] | None]) -> dict[str, Any]:
    """Changes as nested dicts. A path that changed between file and folder appears both as
    `a` and `a/x`, in any order: the side that exists now wins over the other's deletion."""
    root: dict[str, Any] = {}
    for rel, entry in entries.items():
        parts = rel.split("/")
        node: dict[str, Any] | None = root
        for part in parts[:-1]:
            assert node is not None
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                if nxt is not None and entry is None:
                    node = None  # a file stands where this folder was: nothing to delete
                    break
                nxt = node[part] = {}
            node = nxt
        if node is None or (entry is None and isinstance(node.get(parts[-1]), dict)):
            continue  # a folder stands where this file was: it replaces the file
        node[parts[-1]] = entry
    return root


class TreeEdit:
    """A tree's entries being changed, kept in git's order (a dict keeps its order): a
    changed entry stays in its place and a new one that sorts after all others (a new
    message file, a run's record) goes last, so only another edit needs a sort."""

    def __init__(self, entries: dict[bytes, bytes]) -> None:
        self.entries = entries  # in git's order (parsed from a tree, or kept from an edit)
        self.ordered = True
        self._last = _sort_key(*next(reversed(entries.items()))) if entries else b""

    def put(self, name: bytes, entry: bytes) -> bool:
        """Set `name`'s entry; True if the name is new."""
        old = self.entries.get(name)
        if old is None:
            key = _sort_key(name, entry)
            if self.ordered and key > self._last:
                self._last = key
            else:
                self.ordered = False
        elif (entry_tree(old) is None) != (entry_tree(entry) is None):
            self.ordered = False  # a file became a folder or back: its place may change
        self.entries[name] = entry
        return old is None

    def done(self) -> tuple[dict[bytes, bytes], bytes]:
        """The entries in git's order and the tree's bytes."""
        if not self.ordered:
            self.entries = sorted_entries(self.entries)
            self.ordered = True
        return self.entries, b"".join(self.entries.values())


def plain_name(name: str) -> bool:
    """A tree entry name that is plain ASCII and cannot be one git refuses."""
    return bool(_PLAIN.fullmatch(name)) and "/" not in name and name not in (".", "..") and \
        not name.lower().startswith(_UNSAFE_START)


def check_name(name: str, repo: pygit2.Repository, oid: pygit2.Oid, mode: int) -> None:
    """Refuse a tree entry name git would refuse (as libgit2's TreeBuilder does, with the
    same error), cheaply for the common plain name. The object must be on disk (libgit2
    looks it up)."""
    if plain_name(name):
        return
    repo.TreeBuilder().insert(name, oid, mode)  # raises pygit2.GitError as it always did


def common_dir(repo: pygit2.Repository) -> Path:
    """The repository's shared git folder (a worktree's git dir names it in `commondir`)."""
    gitdir = Path(repo.path)
    try:
        rel = (gitdir / "commondir").read_text().strip()
    except FileNotFoundError:
        return gitdir
    return (gitdir / rel).resolve()


class TreeCache:
    """The entries of the trees this session wrote or read last ({name: entry bytes}, as
    `parse_tree` makes them), by raw id, most recent last: the next checkpoint's base trees
    are the last one's, so they are neither read nor parsed again. Bounded by their bytes."""

    def __init__(self, repo: pygit2.Repository, limit: int = 256 * 1024,
                 before_read: Callable[[], None] | None = None) -> None:
        self.repo = repo
        self.before_read = before_read
        self.limit = limit
        self._trees: OrderedDict[bytes, tuple[dict[bytes, bytes], int]] = OrderedDict()
        self._size = 0

    def entries(self, raw: bytes, copy: bool = True) -> dict[bytes, bytes]:
        """A copy of the tree's entries, to edit (`copy=False`: to read only)."""
        hit = self._trees.get(raw)
        if hit is not None:
            self._trees.move_to_end(raw)
            return dict(hit[0]) if copy else hit[0]
        if self.before_read is not None:
            self.before_read()  # objects kept in memory are written before one is read
        kind, data = self.repo.odb.read(pygit2.Oid(raw=raw))[:2]
        if kind != pygit2.GIT_OBJECT_TREE:
            raise ValueError(f"{raw.hex()} is not a tree")
        entries = parse_tree(data)
        self.put(raw, entries, len(data))
        return dict(entries) if copy else entries

    def put(self, raw: bytes, entries: dict[bytes, bytes], size: int) -> None:
        """Keep `entries` (not changed after): `size`, the tree's bytes (its names and ids
        are kept about twice over, with a dict's table)."""
        size *= 3
        if size > self.limit // 4:
            return  # a big folder of the workdir: read when needed, as libgit2 would
        if raw in self._trees:
            self._trees.move_to_end(raw)
            return
        self._trees[raw] = (entries, size)
        self._size += size
        while self._size > self.limit and len(self._trees) > 1:
            self._size -= self._trees.popitem(last=False)[1][1]

    def clear(self) -> None:
        self._trees.clear()
        self._size = 0


def signature_line(sig: pygit2.Signature) -> bytes:
    offset = sig.offset
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset), 60)
    return b"%s <%s> %d %s%02d%02d" % (sig.raw_name, sig.raw_email, sig.time, sign.encode(),
                                       hours, minutes)


def encode_commit(tree: bytes, parents: list[bytes], author: pygit2.Signature,
                  committer: pygit2.Signature, message: str) -> bytes:
    """A commit's bytes as libgit2's create_commit writes them (no encoding header: UTF-8)."""
    lines = [b"tree " + tree.hex().encode()]
    lines += [b"parent " + p.hex().encode() for p in parents]
    lines.append(b"author " + signature_line(author))
    lines.append(b"committer " + signature_line(committer))
    return b"\n".join(lines) + b"\n\n" + message.encode()


def commit_summary(message: str) -> str:
    """libgit2's `git_commit_summary`: the first paragraph (up to a blank or whitespace-only
    line), a whitespace run holding a newline made one space, trailing whitespace dropped."""
    lines = message.lstrip("\n").split("\n")
    para = lines[:1]
    for line in lines[1:]:
        if not line.strip(_SPACE_NOT_LF):
            break
        para.append(line)
    text = "\n".join(para).rstrip(_SPACE)
    return _RUN.sub(lambda m: " " if "\n" in m[0] else m[0], text)


def reflog_message(message: str, parents: int) -> str:
    """What libgit2 logs for a commit: "commit", "(initial)" or "(merge)", the summary."""
    kind = " (initial)" if parents == 0 else " (merge)" if parents > 1 else ""
    return f"commit{kind}: {commit_summary(message)}"


class HeldBranch:
    """A loose ref locked as git locks one, its lock file holding the new id (`lock_branch`),
    until `publish` renames it into place or `abandon` gives it up."""

    def __init__(self, ref: str, path: Path, lock: Path, fd: int, old: bytes,
                 new: bytes) -> None:
        self.ref, self.path, self.lock, self.fd = ref, path, lock, fd
        self.old, self.new = old, new

    def sync(self) -> None:
        """The new id on disk (a sync of its batch): the ref survives a cut as the new id or
        the old, never empty."""
        os.fsync(self.fd)

    def publish(self, repo: pygit2.Repository, common: Path, committer: pygit2.Signature,
                log_message: str, head_log: bool) -> None:
        """After `sync` and after everything the new commit names is on disk: the reflog
        line, the rename, its folder synced (what follows, run_completed, may say so)."""
        os.close(self.fd)
        self.fd = -1
        line = b"%s %s %s\t%s\n" % (self.old.hex().encode(), self.new.hex().encode(),
                                    signature_line(committer),
                                    log_message.replace("\n", " ").encode())
        _append_if_there(common / "logs" / self.ref, line)
        if head_log:
            _append_if_there(Path(repo.path) / "logs" / "HEAD", line)
        replace(self.lock, self.path)
        sync_dir(self.path.parent)

    def abandon(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.lock.unlink(missing_ok=True)


def lock_branch(common: Path, ref: str, old: bytes, new: bytes) -> HeldBranch | None:
    """Lock the loose ref `ref` (refs/heads/…) to move it from `old` to `new`, as git does:
    its lock file made and given the new id (not yet synced). None when the ref is not a
    loose file holding an id (packed, symbolic): the caller asks libgit2. Raises
    BranchMoved when it holds another commit or its lock is taken."""
    path = common / ref
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError as e:
        raise BranchMoved(f"{ref} is locked by another writer") from e
    except FileNotFoundError:
        return None
    held = HeldBranch(ref, path, lock, fd, old, new)
    try:
        try:
            current = path.read_bytes().strip()
        except FileNotFoundError:
            current = b""
        if len(current) != 40 or current.startswith(b"ref:"):
            held.abandon()
            return None
        if current != old.hex().encode():
            raise BranchMoved(f"{ref} is at {current.decode()}, not {old.hex()}")
        os.write(fd, new.hex().encode() + b"\n")
    except BaseException:
        held.abandon()
        raise
    return held


def move_branch(repo: pygit2.Repository, common: Path, ref: str, old: bytes, new: bytes,
                committer: pygit2.Signature, log_message: str, head_log: bool) -> bool:
    """Move the loose ref `ref` (refs/heads/…) from `old` to `new`, as git does. False when
    the ref is not a loose file holding an id (packed, symbolic): the caller asks libgit2.
    Raises BranchMoved when it holds another commit or its lock is taken."""
    held = lock_branch(common, ref, old, new)
    if held is None:
        return False
    try:
        held.sync()
        held.publish(repo, common, committer, log_message, head_log)
    except BaseException:
        held.abandon()
        raise
    return True


def _append_if_there(path: Path, line: bytes) -> None:
    """A reflog line, when the log exists (libgit2 made it with the branch's first commit)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
