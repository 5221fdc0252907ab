"""The one three-way merge (git/merge3.py), read back with the git CLI: hunks that do not
overlap merge, an overlap is a clash each caller settles (a side, its own bytes, or a side
favored), the merged tree is refused while a clash is open, and a file against a folder (in
each direction) is reported and keeps both sides whichever side is taken."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from server.git.merge3 import OpenConflicts, Side, markers, merge
from server.git.trees import apply_changes, empty_tree

BLOB = int(FileMode.BLOB)


def git(repo: pygit2.Repository, *args: str) -> str:
    return subprocess.run(["git", "-C", repo.path, *args], capture_output=True, text=True,
                          check=True).stdout


def tree(repo: pygit2.Repository, files: dict[str, str]) -> pygit2.Oid:
    made = apply_changes(repo, None, {p: (repo.create_blob(t.encode()), BLOB)
                                      for p, t in files.items()})
    return (made or empty_tree(repo)).id


def read(repo: pygit2.Repository, oid: pygit2.Oid) -> dict[str, str]:
    """`git ls-tree -r` then `git cat-file -p` of each file; `git fsck` must accept it."""
    git(repo, "fsck", "--strict", "--no-dangling")
    out = {}
    for line in git(repo, "ls-tree", "-r", "-z", str(oid)).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            out[path] = git(repo, "cat-file", "-p", meta.split()[2])
    return out


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "r.git"), bare=True)


def test_hunks_apart_merge_and_the_tree_holds_both(repo: pygit2.Repository) -> None:
    base = tree(repo, {"a.txt": "1\n2\n3\n4\n5\n", "b.txt": "b\n"})
    ours = tree(repo, {"a.txt": "one\n2\n3\n4\n5\n", "b.txt": "b\n"})
    theirs = tree(repo, {"a.txt": "1\n2\n3\n4\nfive\n", "c.txt": "c\n"})
    merged = merge(repo, base, ours, theirs)
    assert merged.conflicts == [] and merged.open() == []
    assert read(repo, merged.tree()) == {"a.txt": "one\n2\n3\n4\nfive\n", "c.txt": "c\n"}


@pytest.mark.parametrize("side", ["ours", "theirs"])
def test_an_overlap_is_a_clash_the_caller_settles(repo: pygit2.Repository, side: Side) -> None:
    base = tree(repo, {"a.txt": "x\n", "n.txt": "1\n2\n3\n4\n5\n"})
    ours = tree(repo, {"a.txt": "mine\n", "n.txt": "one\n2\n3\n4\n5\n"})
    theirs = tree(repo, {"a.txt": "yours\n", "n.txt": "1\n2\n3\n4\nfive\n"})
    merged = merge(repo, base, ours, theirs, labels=("main", "run/x"))
    assert [c.path for c in merged.conflicts] == ["a.txt"]
    [clash] = merged.open()
    assert clash.folder == () and clash.folder_side is None
    with pytest.raises(OpenConflicts):
        merged.tree()
    text = markers(repo, clash, "main", "run/x", 1000).decode()
    assert "<<<<<<< main\nmine\n=======\nyours\n>>>>>>> run/x" in text
    merged.take(clash, side)
    got = read(repo, merged.tree())
    assert got == {"a.txt": "mine\n" if side == "ours" else "yours\n",
                   "n.txt": "one\n2\n3\n4\nfive\n"}


def test_a_favored_side_settles_hunks_and_still_reports_them(
        repo: pygit2.Repository) -> None:
    base = tree(repo, {"a.txt": "x\n", "gone.txt": "g\n"})
    ours = tree(repo, {"a.txt": "mine\n", "gone.txt": "edited\n"})
    theirs = tree(repo, {"a.txt": "yours\n"})
    merged = merge(repo, base, ours, theirs, favor="theirs")
    assert sorted(c.path for c in merged.conflicts) == ["a.txt", "gone.txt"]
    # The overlap took theirs; an edit against a deletion is left to the caller.
    assert [c.path for c in merged.open()] == ["gone.txt"]
    [clash] = merged.open()
    merged.put(clash, b"by hand\n")
    assert read(repo, merged.tree()) == {"a.txt": "yours\n", "gone.txt": "by hand\n"}


@pytest.mark.parametrize("folder_side", ["ours", "theirs"])
@pytest.mark.parametrize("taken", ["ours", "theirs"])
def test_a_file_against_a_folder_is_reported_and_keeps_both(
        repo: pygit2.Repository, folder_side: Side, taken: Side) -> None:
    base = tree(repo, {"keep.txt": "k\n"})
    with_file = tree(repo, {"keep.txt": "k\n", "p": "a file\n"})
    with_folder = tree(repo, {"keep.txt": "k\n", "p/q.txt": "in a folder\n",
                              "p/r/s.txt": "deeper\n"})
    ours, theirs = (with_folder, with_file) if folder_side == "ours" else (with_file, with_folder)
    merged = merge(repo, base, ours, theirs, labels=("main", "run/abc"))
    [clash] = merged.conflicts
    assert clash.path == "p" and clash.folder == ("p/q.txt", "p/r/s.txt")
    assert clash.folder_side == folder_side
    merged.take(merged.open()[0], taken)
    got = read(repo, merged.tree())
    label = {"ours": "main", "theirs": "run_abc"}
    if taken == folder_side:  # the folder keeps the name, the file is set aside
        assert got == {"keep.txt": "k\n", "p/q.txt": "in a folder\n", "p/r/s.txt": "deeper\n",
                       f"p~{label['theirs' if folder_side == 'ours' else 'ours']}": "a file\n"}
    else:
        aside = f"p~{label[folder_side]}"
        assert got == {"keep.txt": "k\n", "p": "a file\n", f"{aside}/q.txt": "in a folder\n",
                       f"{aside}/r/s.txt": "deeper\n"}


@pytest.mark.parametrize("folder_side", ["ours", "theirs"])
def test_own_bytes_for_a_file_against_a_folder_set_the_folder_aside(
        repo: pygit2.Repository, folder_side: Side) -> None:
    with_file = tree(repo, {"p": "a file\n"})
    with_folder = tree(repo, {"p/q.txt": "in a folder\n"})
    ours, theirs = (with_folder, with_file) if folder_side == "ours" else (with_file, with_folder)
    merged = merge(repo, tree(repo, {}), ours, theirs, labels=("main", "side"))
    [clash] = merged.open()
    merged.put(clash, b"written by hand\n")
    aside = "p~main" if folder_side == "ours" else "p~side"
    assert read(repo, merged.tree()) == {"p": "written by hand\n",
                                         f"{aside}/q.txt": "in a folder\n"}
