"""`treeops.tree_delta` (the changed files between two trees, reading only the folders on
changed paths) agrees with libgit2's whole-tree diff, file/folder swaps and modes included."""

from __future__ import annotations

from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from server.git.trees import tree_delta


def make_tree(repo: pygit2.Repository, files: dict[str, tuple[bytes, int]]) -> pygit2.Tree:
    index = pygit2.Index()
    for path, (data, mode) in files.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), mode))
    return repo[index.write_tree(repo)]


def by_libgit2(a: pygit2.Tree, b: pygit2.Tree) -> set[tuple[str, object, object]]:
    out: dict[str, list[object]] = {}
    for d in a.diff_to_tree(b).deltas:
        if d.status != DeltaStatus.ADDED:
            out.setdefault(d.old_file.path, [None, None])[0] = (d.old_file.id, d.old_file.mode)
        if d.status != DeltaStatus.DELETED:
            out.setdefault(d.new_file.path, [None, None])[1] = (d.new_file.id, d.new_file.mode)
    return {(p, o, n) for p, (o, n) in out.items()}


def test_tree_delta_matches_the_whole_tree_diff(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    blob, exe, link = FileMode.BLOB, FileMode.BLOB_EXECUTABLE, FileMode.LINK
    before = {"a.txt": (b"a", blob), "same/x": (b"x", blob), "d/e/f": (b"f", blob),
              "swap": (b"file", blob), "mode": (b"m", blob), "gone/g": (b"g", blob),
              "lnk": (b"target", link), **{f"big/{i:03d}": (b"%d" % i, blob) for i in range(300)}}
    after = dict(before)
    del after["swap"], after["gone/g"], after["big/007"]
    after.update({"swap/inner": (b"now a folder", blob), "mode": (b"m", exe),
                  "a.txt": (b"A", blob), "d/e/new": (b"n", blob), "lnk": (b"target", blob),
                  "big/150": (b"changed", blob), "new/deep/file": (b"z", blob)})
    a, b = make_tree(repo, before), make_tree(repo, after)
    got = {(p, o, n) for p, o, n in tree_delta(a, b)}
    assert got == by_libgit2(a, b)
    assert {p for p, _, _ in got} == {"a.txt", "swap", "swap/inner", "mode", "gone/g", "lnk",
                                       "big/007", "big/150", "d/e/new", "new/deep/file"}
    assert tree_delta(a, a) == []
    assert {p for p, o, n in tree_delta(None, b)} == set(after)
    assert all(n is None for _, _, n in tree_delta(a, None))
