"""Tree helpers for import/export: the workdir subtree of a session commit, the changes
between two trees, and a tree with changes applied (in any repository, blobs copied over
when missing). Only the trees on changed paths are rebuilt."""

from __future__ import annotations

from typing import Any

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from server.git import lookup as gitnames
from server.git.workdir.scan import WORKDIR

Entry = tuple[pygit2.Oid, int]
Changes = dict[str, Entry | None]


def workdir_tree(commit: pygit2.Commit | None) -> pygit2.Tree | None:
    if commit is None:
        return None
    try:
        obj = commit.tree[WORKDIR]
    except KeyError:
        return None
    return obj if isinstance(obj, pygit2.Tree) else None


Delta = tuple[str, Entry | None, Entry | None]


def tree_delta(a: pygit2.Tree | None, b: pygit2.Tree | None, prefix: str = ""
               ) -> list[Delta]:
    """(path, entry in `a`, entry in `b`) of every file that differs, walking only the
    subtrees whose ids differ: libgit2's tree diff reads both trees whole (~120 ms for
    100,000 files), this costs the folders on the changed paths."""
    out: list[Delta] = []
    if a is not None and b is not None and a.id == b.id:
        return out
    # An entry of a tree always has a name (pygit2 types it `str | None` for any object).
    olds = {n: e for e in a if (n := e.name) is not None} if a is not None else {}
    news = {n: e for e in b if (n := e.name) is not None} if b is not None else {}
    for name in sorted(olds.keys() | news.keys()):
        old, new = olds.get(name), news.get(name)
        if old is not None and new is not None and old.id == new.id and \
                old.filemode == new.filemode:
            continue
        path = f"{prefix}{name}"
        old_tree = old if isinstance(old, pygit2.Tree) else None
        new_tree = new if isinstance(new, pygit2.Tree) else None
        if old_tree is not None or new_tree is not None:
            out += tree_delta(old_tree, new_tree, f"{path}/")
        old_file = (old.id, int(old.filemode)) if old is not None and old_tree is None else None
        new_file = (new.id, int(new.filemode)) if new is not None and new_tree is None else None
        if old_file is not None or new_file is not None:
            out.append((path, old_file, new_file))
    return out


def tree_changes(a: pygit2.Tree | None, b: pygit2.Tree | None) -> Changes:
    """path → new (blob id, mode), or None where `b` has no file that `a` had."""
    if a is None and b is None:
        return {}
    if a is None:
        assert b is not None
        diff = b.diff_to_tree(swap=True)
    elif b is None:
        diff = a.diff_to_tree()
    else:
        diff = a.diff_to_tree(b)
    out: Changes = {}
    for delta in diff.deltas:
        if delta.status == DeltaStatus.DELETED:
            out.setdefault(delta.old_file.path, None)
        else:
            if delta.status == DeltaStatus.TYPECHANGE:
                out.setdefault(delta.old_file.path, None)
            out[delta.new_file.path] = (delta.new_file.id, int(delta.new_file.mode))
    return out


def tree_files(tree: pygit2.Tree | None, prefix: str = "") -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    if tree is None:
        return out
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            out.update(tree_files(entry, f"{prefix}{entry.name}/"))
        else:
            out[f"{prefix}{entry.name}"] = (entry.id, int(entry.filemode))
    return out


def _nest(changes: Changes) -> dict[str, Any]:
    """Deletions first, so a file replaced by a folder (or the reverse) ends as the new one."""
    root: dict[str, Any] = {}
    for rel, entry in sorted(changes.items(), key=lambda kv: kv[1] is not None):
        *dirs, name = rel.split("/")
        node = root
        for part in dirs:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        if entry is None and isinstance(node.get(name), dict):
            continue
        node[name] = entry
    return root


def copy_blobs(dst: pygit2.Repository, src: pygit2.Repository, changes: Changes) -> None:
    if dst is src:
        return
    for entry in changes.values():
        if entry is not None and entry[0] not in dst:
            dst.odb.write(pygit2.enums.ObjectType.BLOB, gitnames.blob_data(src, entry[0]))


def apply_changes(repo: pygit2.Repository, tree: pygit2.Tree | None,
                  changes: Changes) -> pygit2.Tree | None:
    """`tree` with `changes` applied, written in `repo` (None when it ends empty)."""
    oid = _apply(repo, tree, _nest(changes))
    return None if oid is None else gitnames.tree_at(repo, oid)


def _apply(repo: pygit2.Repository, tree: pygit2.Tree | None,
           nested: dict[str, Any]) -> pygit2.Oid | None:
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name, change in nested.items():
        if isinstance(change, dict):
            sub = None
            if tree is not None and name in tree:
                obj = tree[name]
                sub = obj if isinstance(obj, pygit2.Tree) else None
            oid = _apply(repo, sub, change)
            if oid is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, oid, FileMode.TREE)
        elif change is None:
            if builder.get(name) is not None:
                builder.remove(name)
        else:
            builder.insert(name, change[0], change[1])
    if len(builder) == 0:
        return None
    return builder.write()


def empty_tree(repo: pygit2.Repository) -> pygit2.Tree:
    return gitnames.tree_at(repo, repo.TreeBuilder().write())
