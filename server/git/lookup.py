"""Tree and reference lookups by name that do not leak the name (issue 11).

pygit2 (1.15 to 1.21 at least) turns a name or path into C with `pgit_borrow_fsdefault`,
which takes a new reference from `PyOS_FSPath` and never drops it: every `tree[name]`,
`name in tree`, `TreeBuilder.get/remove`, `references.get`, `lookup_reference` and
`create_blob_fromdisk` keeps its argument alive for the life of the process. On a turn that
is a dozen small strings (path parts, ref names), scattered over the heap: after a burst of
turns they pin the allocator's arenas, so RSS never comes back down when the sessions idle.

So a turn's git work looks names up through here, by pygit2 calls that take no name:
a tree's entries by index (git keeps them sorted, so a binary search finds one in
O(log entries)), a folder's entries removed by splicing its raw object, a branch by
`lookup_branch` (which converts its name without the leak), any other reference by
`revparse_single` or by listing them, and a file's blob from its bytes.

tests/git/test_no_leaking_calls.py greps server/ for the leaking call forms: a new one
fails there, so every such lookup goes through this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

OID_SIZE = 20  # sha1 repositories: a raw tree entry is "<mode> <name>\0" + 20 bytes
RAW_ENTRY = re.compile(rb"(\d+) ([^\0]*)\0(.{20})", re.S)
RAW_TREE_MODE = b"40000"  # a folder's mode as a raw tree writes it
WHOLE_FILE = 8 << 20  # a file up to this is read into memory to make its blob
HEADS = "refs/heads/"


def _key(name: str, is_tree: bool) -> bytes:
    """The name as git sorts tree entries: bytes, a folder as if it ended in '/'."""
    raw = os.fsencode(name)
    return raw + b"/" if is_tree else raw


def raw_entries(tree: pygit2.Tree) -> list[tuple[bytes, bytes, bytes]]:
    """(octal mode, name, raw id) of each entry of `tree`, in git's order, read from its raw
    object in one pass: a pygit2 object and a FileMode made per entry cost far more where a
    whole folder is compared or listed (issue 30)."""
    return RAW_ENTRY.findall(tree.read_raw())


def entry_index(tree: pygit2.Tree, name: str) -> int | None:
    """The index of the entry called `name` in `tree` (a file or a folder), or None."""
    if not name or "/" in name:
        return None
    for is_tree in (True, False):  # a name is one or the other: look where each would sort
        want = _key(name, is_tree)
        lo, hi = 0, len(tree)
        while lo < hi:
            mid = (lo + hi) // 2
            entry = tree[mid]
            # isinstance, not `filemode == TREE_MODE`: a FileMode made per step cost more
            # than the search (issue 30).
            key = _key(entry.name or "", isinstance(entry, pygit2.Tree))
            if key < want:
                lo = mid + 1
            elif key > want:
                hi = mid
            else:
                return mid
    return None


def entry(tree: pygit2.Tree | None, name: str) -> pygit2.Object | None:
    """The entry called `name` in `tree` (`tree[name]` for one level), or None."""
    if tree is None:
        return None
    index = entry_index(tree, name)
    return None if index is None else tree[index]


def subtree(tree: pygit2.Tree | None, name: str) -> pygit2.Tree | None:
    """The folder called `name` in `tree`, or None (absent, or a file)."""
    found = entry(tree, name)
    return found if isinstance(found, pygit2.Tree) else None


def at_path(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    """The entry at `path` (folders separated by '/') under `tree`, or None: `tree[path]`."""
    *folders, last = path.split("/")
    for name in folders:
        tree = subtree(tree, name)
    return entry(tree, last)


def without(repo: pygit2.Repository, tree: pygit2.Tree, names: Iterable[str]) -> pygit2.Tree:
    """`tree` less the entries called `names` (those it has), written as a raw tree object:
    what `TreeBuilder.remove` does, without the leak."""
    drop = sorted(i for i in (entry_index(tree, n) for n in names) if i is not None)
    if not drop:
        return tree
    raw = repo.odb.read(tree.id)[1]
    parts, pos, start = [], 0, 0
    index = 0
    for i in drop:  # walk to each dropped entry: entries are "<mode> <name>\0<oid>"
        while index < i:
            pos = raw.index(b"\0", pos) + 1 + OID_SIZE
            index += 1
        parts.append(raw[start:pos])
        pos = raw.index(b"\0", pos) + 1 + OID_SIZE
        index += 1
        start = pos
    parts.append(raw[start:])
    return tree_at(repo, repo.odb.write(ObjectType.TREE, b"".join(parts)))


def branch_target(repo: pygit2.Repository, name: str) -> pygit2.Oid | None:
    """The tip of local branch `name`, or None: `references.get("refs/heads/" + name)`."""
    try:  # None when there is no such branch: pygit2's stub says it always finds one
        branch: pygit2.Branch | None = repo.lookup_branch(name)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
        return None
    return None if branch is None else ref_oid(branch)


def reference(repo: pygit2.Repository, name: str) -> pygit2.Reference | None:
    """The reference `name` (a full name, refs/...), or None: `references.get(name)`. A
    branch by `lookup_branch`; any other by listing the references (a handful: Braid's own
    refs/braid/*, and a source repository's), whose iterator takes no name."""
    if name.startswith(HEADS):
        try:  # None when there is no such branch: pygit2's stub says it always finds one
            branch: pygit2.Branch | None = repo.lookup_branch(name[len(HEADS):])
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
            return None
        return branch
    for ref in repo.references.iterator():
        if ref.name == name:
            return ref
    return None


def ref_oid(ref: pygit2.Reference) -> pygit2.Oid:
    """The id `ref` points at: its target, or for a symbolic reference (whose target is
    a name) the commit it resolves to."""
    target = ref.target
    return target if isinstance(target, pygit2.Oid) else ref.peel(pygit2.Commit).id


def ref_commit(repo: pygit2.Repository, ref_name: str) -> pygit2.Commit | None:
    """The commit the reference `ref_name` (a full name, refs/...) points at, or None."""
    try:
        obj = repo.revparse_single(ref_name)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
        return None
    return obj.peel(pygit2.Commit)


def blob_from_disk(repo: pygit2.Repository, path: Path | str,
                   write: Callable[[bytes], pygit2.Oid] | None = None) -> pygit2.Oid:
    """A blob of the regular file at `path`, as `create_blob_fromdisk` makes it, without
    the leak. libgit2 runs a file inside the repository through its filters (line endings
    by `core.autocrlf` or `.gitattributes`, `ident`): those only change content holding a
    CR or a `$Id`, so such a file, and one too big to read whole, still goes through it.
    `write`: how the other files' blobs are written (GitSession.blob), else libgit2."""
    try:  # not through a symlink that replaced the file since: libgit2 decides then
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return repo.create_blob_fromdisk(str(path))
    with open(fd, "rb") as f:
        if os.fstat(fd).st_size <= WHOLE_FILE:
            data = f.read()
            if b"\r" not in data and b"$Id" not in data:
                return write(data) if write is not None else repo.create_blob(data)
    return repo.create_blob_fromdisk(str(path))


# -- objects by id, typed: `repo[oid]` may be any kind of object; these say which kind the
# caller holds, and check it (a TypeError, where `.data` on a tree was an AttributeError).

def blob_data(repo: pygit2.Repository, oid: pygit2.Oid | str) -> bytes:
    """The bytes of blob `oid`."""
    obj = repo[oid]
    if not isinstance(obj, pygit2.Blob):
        raise TypeError(f"{oid} is not a blob")
    return obj.data


def tree_at(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Tree:
    """Tree `oid`."""
    obj = repo[oid]
    if not isinstance(obj, pygit2.Tree):
        raise TypeError(f"{oid} is not a tree")
    return obj


def commit_at(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Commit:
    """Commit `oid` (peeled, as GitSession.commit does: pygit2's stub does not make
    Commit an Object, so an isinstance check could not narrow `repo[oid]`)."""
    return repo[oid].peel(pygit2.Commit)
