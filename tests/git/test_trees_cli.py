"""The tree toolkit (git/trees.py) against the git CLI: a tree `apply_changes` writes is
what `git ls-tree -r` lists and `git fsck` accepts, `files` lists what `git ls-tree -r`
does, `tree_delta` and `tree_changes` name the files `git diff-tree -r` does, and the
session's own tree writer (`GitSession.tree_with`, from bytes) writes the same tree ids
as `apply_changes` (one file/folder rule for both)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from server.git.session import GitSession
from server.git.trees import (
    Entry,
    apply_changes,
    file_at,
    files,
    files_at,
    tree_changes,
    tree_delta,
)

BLOB, EXE, LINK = int(FileMode.BLOB), int(FileMode.BLOB_EXECUTABLE), int(FileMode.LINK)


def git(repo: pygit2.Repository, *args: str) -> str:
    return subprocess.run(["git", "-C", repo.path, *args], capture_output=True, text=True,
                          check=True).stdout


def ls_tree(repo: pygit2.Repository, tree: pygit2.Tree | None) -> dict[str, Entry]:
    """`git ls-tree -r`: path → (blob id, mode)."""
    if tree is None:
        return {}
    out: dict[str, Entry] = {}
    for line in git(repo, "ls-tree", "-r", "-z", str(tree.id)).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, _kind, oid = meta.split()
            out[path] = (pygit2.Oid(hex=oid), int(mode, 8))
    return out


def diff_tree(repo: pygit2.Repository, a: pygit2.Tree, b: pygit2.Tree) -> dict[str, Entry | None]:
    """`git diff-tree -r`: path → new (blob id, mode), None where deleted."""
    out: dict[str, Entry | None] = {}
    raw = git(repo, "diff-tree", "-r", "-z", "--no-renames", str(a.id), str(b.id)).split("\0")
    for meta, path in zip(raw[0::2], raw[1::2], strict=False):
        if not meta:
            continue
        _old_mode, new_mode, _old, new, status = meta.lstrip(":").split()
        out[path] = None if status == "D" else (pygit2.Oid(hex=new), int(new_mode, 8))
    return out


def fsck(repo: pygit2.Repository, tree: pygit2.Tree) -> None:
    sig = pygit2.Signature("t", "t@localhost")
    oid = repo.create_commit(None, sig, sig, "check\n", tree.id, [])
    repo.references.create("refs/heads/check", oid, force=True)  # so fsck reaches it
    subprocess.run(["git", "-C", repo.path, "fsck", "--strict", "--no-dangling"], check=True,
                   capture_output=True)


def random_changes(repo: pygit2.Repository, have: dict[str, Entry], rnd: random.Random
                   ) -> dict[str, Entry | None]:
    """Adds, edits, deletions, mode changes, and a file and a folder swapped for each other."""
    changes: dict[str, Entry | None] = {}
    paths = sorted(have)
    touched: list[str] = []  # one change per folder a round: a consistent set, as git makes
    for path in rnd.sample(paths, min(len(paths), 8)):
        folder = path.rsplit("/", 1)[0] + "/" if "/" in path else path
        if any(folder.startswith(t) or t.startswith(folder) for t in touched):
            continue
        touched.append(folder)
        roll = rnd.random()
        if roll < 0.3:
            changes[path] = None
        elif roll < 0.5:
            changes[path] = (have[path][0], EXE if have[path][1] == BLOB else BLOB)
        elif roll < 0.7 and "/" in path:  # its folder becomes a file
            folder = path.rsplit("/", 1)[0]
            for other in paths:
                if other.startswith(folder + "/"):
                    changes[other] = None
            changes[folder] = (repo.create_blob(b"was a folder"), BLOB)
        elif roll < 0.85:  # the file becomes a folder
            changes[path] = None
            changes[f"{path}/inner/f"] = (repo.create_blob(b"was a file"), BLOB)
        else:
            changes[path] = (repo.create_blob(rnd.randbytes(8)), have[path][1])
    for i in range(4):
        changes[f"new{rnd.randrange(10**9)}/d{i}/n.txt"] = (repo.create_blob(b"n%d" % i), BLOB)
    changes[f"ln{rnd.randrange(10**9)}"] = (repo.create_blob(b"target"), LINK)
    return changes


def expected(have: dict[str, Entry], changes: dict[str, Entry | None]) -> dict[str, Entry]:
    """What git would hold: the deletions, then what exists now (a folder's files replace
    the file of its name, and a file replaces a folder whose files all went)."""
    out = dict(have)
    for path, entry in changes.items():
        if entry is None:
            out.pop(path, None)
    for path, entry in changes.items():
        if entry is not None:
            out[path] = entry
    return out


def start(repo: pygit2.Repository) -> tuple[pygit2.Tree, dict[str, Entry]]:
    have = {f"d{i % 4}/s{i % 3}/f{i}.txt": (repo.create_blob(b"%d" % i), BLOB)
            for i in range(40)}
    have["top.txt"] = (repo.create_blob(b"top"), BLOB)
    tree = apply_changes(repo, None, have)
    assert tree is not None
    return tree, have


def test_apply_changes_walk_and_diff_round_trip_through_git(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    rnd = random.Random(22)
    tree, have = start(repo)
    assert ls_tree(repo, tree) == files(tree) == have
    for _ in range(12):
        changes = random_changes(repo, have, rnd)
        new = apply_changes(repo, tree, changes)
        assert new is not None
        want = expected(have, changes)
        assert ls_tree(repo, new) == files(new) == want
        fsck(repo, new)
        # The diff both ways: `git diff-tree -r`, and the changes that remake `new`.
        assert tree_changes(tree, new) == diff_tree(repo, tree, new)
        assert {p for p, _, _ in tree_delta(tree, new)} == set(diff_tree(repo, tree, new))
        remade = apply_changes(repo, tree, tree_changes(tree, new))
        assert remade is not None and remade.id == new.id
        # Looked up one by one and all at once: the files, folders (None) and absent paths.
        asked = [*want, *have, *{p.rsplit("/", 1)[0] for p in want}, "no/such", "top.txt/x"]
        assert files_at(new, asked) == {p: file_at(new, p) for p in asked} == \
            {p: want.get(p) for p in asked}
        assert files_at(new, asked[:3]) == {p: want.get(p) for p in asked[:3]}  # by name
        tree, have = new, want


def test_everything_removed_is_no_tree(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    tree, have = start(repo)
    assert apply_changes(repo, tree, dict.fromkeys(have)) is None
    assert file_at(tree, "d0") is None  # a folder is no file


def test_the_session_writer_and_apply_changes_write_the_same_trees(tmp_path: Path) -> None:
    """GitSession's trees from bytes (the checkpoint path) and libgit2's TreeBuilder here."""
    git_ = GitSession.create(tmp_path / "s", {"title": "t"})
    repo = git_.repo
    rnd = random.Random(7)
    tree, have = start(repo)
    for _ in range(8):
        changes = random_changes(repo, have, rnd)
        by_builder = apply_changes(repo, tree, changes)
        by_bytes = git_.tree_with(tree, changes)
        assert by_builder is not None and by_builder.id == by_bytes
        tree, have = by_builder, expected(have, changes)
    git_.close()
