"""A checkpoint's trees and commit written from their bytes, and its branch moved by
compare-and-swap (DESIGN "Checkpoints").

libgit2 spends most of a checkpoint around the writes, not in them: each object written
first looks for an older copy (a utime, then a re-scan of `objects/pack/`), is re-read once
or twice after it is written, and a TreeBuilder copies its whole base tree and checks every
entry's object exists. Here a tree is edited as bytes, starting from the bytes of the tree
this session wrote last (`TreeCache`), and each object is one temporary file renamed to its
name, as git writes loose objects (a kill -9 leaves a temporary file at worst, never a torn
object). The bytes are git's: entries sorted as git sorts them (a folder's name compared as
if it ended in "/"), modes as git writes them; tests/core/test_rawobjects.py compares them
with `git mktree` and pygit2.

The branch moves the way git moves it: `<ref>.lock` created exclusively (another writer's
lock makes this fail), the current value compared with the expected old tip, the reflog
lines appended (as libgit2 writes them for a commit), the lock put in the ref's place
(`fsops.replace`: atomic, without ext4 writing the data out first). Anything
unusual (an unborn or packed ref, a detached HEAD) is left to libgit2 (`move_branch` answers
False).
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections import OrderedDict
from pathlib import Path

import pygit2

from .fsops import rename_new, replace

TREE_MODE = 0o40000
_ENTRY = re.compile(rb"[0-7]+ ([^\0]+)\0.{20}", re.S)
_LEVEL = 1  # git's core.looseCompression default (and libgit2's): loose objects are packed later
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


def entry_tree(entry: bytes) -> bytes | None:
    """The raw id of the folder an entry names (None: not a folder)."""
    if entry.startswith(b"40000 ") or (entry.startswith(b"0") and
                                        int(entry[:entry.index(b" ")], 8) == TREE_MODE):
        return entry[-20:]
    return None


def encode_tree(entries: dict[bytes, bytes]) -> bytes:
    """A tree's bytes, entries in git's order: names compared as bytes, a folder's as if it
    ended in "/" (so `a.txt` < `a/` < `a0`)."""
    order = sorted(entries, key=lambda name: name + b"/" if entry_tree(entries[name])
                   else name)
    return b"".join([entries[name] for name in order])


def object_id(kind: bytes, data: bytes) -> bytes:
    sha = hashlib.sha1(b"%s %d\0" % (kind, len(data)))
    sha.update(data)
    return sha.digest()


def check_name(name: str, repo: pygit2.Repository, oid: pygit2.Oid, mode: int) -> None:
    """Refuse a tree entry name git would refuse (as libgit2's TreeBuilder does, with the
    same error), cheaply for the common plain name."""
    if _PLAIN.fullmatch(name) and "/" not in name and name not in (".", "..") and \
            not name.lower().startswith(_UNSAFE_START):
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


class LooseWriter:
    """Loose objects written as git writes them: deflated into a temporary file, renamed to
    `objects/xx/yyyy…` unless that exists (one `renameat2` call, fsops.py)."""

    def __init__(self, objects: Path) -> None:
        self.objects = objects
        self._made: set[str] = set()  # fan-out folders known to exist

    def write(self, kind: bytes, data: bytes) -> bytes:
        header = b"%s %d\0" % (kind, len(data))
        sha = hashlib.sha1(header)
        sha.update(data)
        raw = sha.digest()
        hexid = raw.hex()
        deflate = zlib.compressobj(_LEVEL)
        body = deflate.compress(header) + deflate.compress(data) + deflate.flush()
        folder = self.objects / hexid[:2]
        # In the object's own folder, as git does: the rename stays in one folder, and git
        # (fsck, prune) knows a `tmp_obj_` file a killed process left there.
        tmp = folder / f"tmp_obj_{os.urandom(6).hex()}"
        fd = self._create(folder, hexid[:2], tmp)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        path = folder / hexid[2:]
        if not rename_new(tmp, path):  # there already (a tree seen before): kept, freshened
            os.unlink(tmp)
            os.utime(path)
        return raw

    def _create(self, folder: Path, name: str, tmp: Path) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        if name in self._made:
            try:
                return os.open(tmp, flags, 0o444)
            except FileNotFoundError:  # `git prune-packed` removed the emptied folder
                pass
        folder.mkdir(exist_ok=True)
        self._made.add(name)
        return os.open(tmp, flags, 0o444)


class TreeCache:
    """The entries of the trees this session wrote or read last ({name: entry bytes}, as
    `parse_tree` makes them), by raw id, most recent last: the next checkpoint's base trees
    are the last one's, so they are neither read nor parsed again. Bounded by their bytes."""

    def __init__(self, repo: pygit2.Repository, limit: int = 256 * 1024) -> None:
        self.repo = repo
        self.limit = limit
        self._trees: OrderedDict[bytes, tuple[dict[bytes, bytes], int]] = OrderedDict()
        self._size = 0

    def entries(self, raw: bytes) -> dict[bytes, bytes]:
        """A copy of the tree's entries, to edit."""
        hit = self._trees.get(raw)
        if hit is not None:
            self._trees.move_to_end(raw)
            return dict(hit[0])
        kind, data = self.repo.odb.read(pygit2.Oid(raw=raw))[:2]
        if kind != pygit2.GIT_OBJECT_TREE:
            raise ValueError(f"{raw.hex()} is not a tree")
        entries = parse_tree(data)
        self.put(raw, entries, len(data))
        return dict(entries)

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


def move_branch(repo: pygit2.Repository, common: Path, ref: str, old: bytes, new: bytes,
                committer: pygit2.Signature, log_message: str, head_log: bool) -> bool:
    """Move the loose ref `ref` (refs/heads/…) from `old` to `new`, as git does. False when
    the ref is not a loose file holding an id (packed, symbolic): the caller asks libgit2.
    Raises BranchMoved when it holds another commit or its lock is taken."""
    path = common / ref
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError as e:
        raise BranchMoved(f"{ref} is locked by another writer") from e
    except FileNotFoundError:
        return False
    try:
        try:
            current = path.read_bytes().strip()
        except FileNotFoundError:
            current = b""
        if len(current) != 40 or current.startswith(b"ref:"):
            os.close(fd)
            lock.unlink()
            return False
        if current != old.hex().encode():
            raise BranchMoved(f"{ref} is at {current.decode()}, not {old.hex()}")
        os.write(fd, new.hex().encode() + b"\n")
        os.close(fd)
        fd = -1
        line = b"%s %s %s\t%s\n" % (old.hex().encode(), new.hex().encode(),
                                    signature_line(committer),
                                    log_message.replace("\n", " ").encode())
        _append_if_there(common / "logs" / ref, line)
        if head_log:
            _append_if_there(Path(repo.path) / "logs" / "HEAD", line)
        replace(lock, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        lock.unlink(missing_ok=True)
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
