"""The tree toolkit, for any repository: changes applied to a tree (`apply_changes`), the
files of a tree (`walk`, `files`), files looked up (`file_at`, many at once `files_at`; a
folder or any entry: lookup.py), and the files that differ between two trees
(`tree_delta`, `tree_changes`).
Only the trees on changed paths are rebuilt or read; no call leaks a name (lookup.py).

A session's own checkpoints write their trees from bytes through `GitSession` (objects.py's
`TreeEdit` and `TreeCache`, measured on the turn's path); both follow one file/folder
rule, objects.py's `nest`: where a path changed between file and folder, the side that
exists now wins over the other side's deletion."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import pygit2
from pygit2.enums import FileMode

from server.git import lookup
from server.git.objects import nest

Entry = tuple[pygit2.Oid, int]
Changes = dict[str, Entry | None]
Delta = tuple[str, Entry | None, Entry | None]
SEARCH_COST = 16  # a name's binary search costs about as much as reading this many entries


# -- walking and looking up -------------------------------------------------------------------

def walk(tree: pygit2.Tree | None, prefix: str = "",
         on_folder: Callable[[], None] | None = None) -> Iterator[tuple[str, pygit2.Object]]:
    """(`prefix` + path, entry) of every file of `tree` (a symlink, a submodule's commit
    too), in git's order; `on_folder` is called as each folder below is entered."""
    if tree is None:
        return
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            if on_folder is not None:
                on_folder()
            yield from walk(entry, f"{prefix}{entry.name}/", on_folder)
        else:
            yield f"{prefix}{entry.name}", entry


def files(tree: pygit2.Tree | None, prefix: str = "") -> dict[str, Entry]:
    """`prefix` + path → (blob id, mode) of every file of `tree`."""
    return {path: (entry.id, int(entry.filemode)) for path, entry in walk(tree, prefix)}


def file_at(tree: pygit2.Tree | None, path: str) -> Entry | None:
    """The file at `path` in `tree` as (blob id, mode); None when absent or a folder."""
    obj = lookup.at_path(tree, path)  # not `tree[path]`: it leaks `path`
    if obj is None or isinstance(obj, pygit2.Tree):
        return None
    return obj.id, int(obj.filemode)


def files_at(tree: pygit2.Tree | None, paths: Iterable[str]) -> dict[str, Entry | None]:
    """`file_at` of each of `paths` at once. A path looked up alone binary-searches each
    of its folders in Python (lookup.py: ~30 us, where `tree[path]` took 0.5 but leaks);
    a checkout's thousands of paths read each folder on their way once instead, a folder
    with few of them wanted still searched by name."""
    out: dict[str, Entry | None] = {}
    items = []
    for path in paths:
        out[path] = None
        items.append((path, path.split("/")))
    _fill(tree, items, 0, out)
    return out


def _fill(tree: pygit2.Tree | None, items: list[tuple[str, list[str]]], depth: int,
          out: dict[str, Entry | None]) -> None:
    if tree is None:
        return
    here: dict[str, list[str]] = {}  # a name in this folder -> the paths that end there
    below: dict[str, list[tuple[str, list[str]]]] = {}  # a folder -> the paths under it
    for path, parts in items:
        if len(parts) == depth + 1:
            here.setdefault(parts[depth], []).append(path)
        else:
            below.setdefault(parts[depth], []).append((path, parts))
    if (len(here) + len(below)) * SEARCH_COST < len(tree):
        found = ((name, lookup.entry(tree, name)) for name in [*here, *below])
    else:  # most of the folder is wanted: its entries, each read once
        found = ((entry.name or "", entry) for entry in tree)
    for name, entry in found:
        if entry is None:
            continue
        if isinstance(entry, pygit2.Tree):
            if name in below:
                _fill(entry, below[name], depth + 1, out)
        elif name in here:
            for path in here[name]:
                out[path] = (entry.id, int(entry.filemode))


# -- two trees ----------------------------------------------------------------------------------

def _entries(tree: pygit2.Tree) -> dict[bytes, tuple[int, bytes, bytes]]:
    """name → (index, octal mode, raw id) of a tree's entries (lookup.raw_entries)."""
    return {name: (index, mode, oid)
            for index, (mode, name, oid) in enumerate(lookup.raw_entries(tree))}


def tree_delta(a: pygit2.Tree | None, b: pygit2.Tree | None, prefix: str = ""
               ) -> list[Delta]:
    """(path, entry in `a`, entry in `b`) of every file that differs, walking only the
    subtrees whose ids differ: libgit2's tree diff reads both trees whole (~120 ms for
    100,000 files), this costs the folders on the changed paths. A path that changed
    between file and folder is listed as the folder's files and the file."""
    out: list[Delta] = []
    if a is not None and b is not None and a.id == b.id:
        return out
    olds = _entries(a) if a is not None else {}
    news = _entries(b) if b is not None else {}
    for raw in sorted(olds.keys() | news.keys()):
        old, new = olds.get(raw), news.get(raw)
        if old is not None and new is not None and old[1:] == new[1:]:
            continue  # the same mode and id
        path = f"{prefix}{os.fsdecode(raw)}"
        folder = lookup.RAW_TREE_MODE
        old_tree = a[old[0]] if a is not None and old is not None and old[1] == folder else None
        new_tree = b[new[0]] if b is not None and new is not None and new[1] == folder else None
        if old_tree is not None or new_tree is not None:
            out += tree_delta(cast(pygit2.Tree | None, old_tree),
                              cast(pygit2.Tree | None, new_tree), f"{path}/")
        old_file = (pygit2.Oid(raw=old[2]), int(old[1], 8)) \
            if old is not None and old_tree is None else None
        new_file = (pygit2.Oid(raw=new[2]), int(new[1], 8)) \
            if new is not None and new_tree is None else None
        if old_file is not None or new_file is not None:
            out.append((path, old_file, new_file))
    return out


def tree_changes(a: pygit2.Tree | None, b: pygit2.Tree | None) -> Changes:
    """The changes that make `a` into `b` (`apply_changes(repo, a, ...)` gives `b`): path
    → new (blob id, mode), or None where `b` has no file that `a` had."""
    return {path: new for path, _old, new in tree_delta(a, b)}


# -- changes → tree -----------------------------------------------------------------------------

def apply_changes(repo: pygit2.Repository, tree: pygit2.Tree | None,
                  changes: Mapping[str, Sequence[Any] | None]) -> pygit2.Tree | None:
    """`tree` with `changes` (path → (object id, mode), or None to remove) applied, written
    in `repo` by libgit2's TreeBuilder, which refuses a name git would (None when it ends
    empty). The objects named must be in `repo` (copy_blobs)."""
    oid = _apply(repo, tree, nest(changes))
    return None if oid is None else lookup.tree_at(repo, oid)


def _apply(repo: pygit2.Repository, tree: pygit2.Tree | None,
           nested: dict[str, Any]) -> pygit2.Oid | None:
    drop: list[str] = []
    put: dict[str, tuple[pygit2.Oid, int]] = {}
    for name, change in nested.items():
        if isinstance(change, dict):
            oid = _apply(repo, lookup.subtree(tree, name), change)
            if oid is None:
                drop.append(name)
            else:
                put[name] = (oid, FileMode.TREE)
        elif change is None:
            drop.append(name)
        else:
            put[name] = (change[0], int(change[1]))
    # Removed by splicing the raw tree: `TreeBuilder.remove` leaks the name (lookup.py).
    base = lookup.without(repo, tree, drop) if tree is not None else None
    builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    for name, (oid, mode) in put.items():
        builder.insert(name, oid, mode)
    if len(builder) == 0:
        return None
    return builder.write()


def copy_blobs(dst: pygit2.Repository, src: pygit2.Repository, changes: Changes) -> None:
    if dst is src:
        return
    for entry in changes.values():
        if entry is not None and entry[0] not in dst:
            dst.odb.write(pygit2.enums.ObjectType.BLOB, lookup.blob_data(src, entry[0]))


def empty_tree(repo: pygit2.Repository) -> pygit2.Tree:
    return lookup.tree_at(repo, repo.TreeBuilder().write())
