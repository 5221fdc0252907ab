"""Trees, commits and branch moves written from bytes (git/objects.py, fsops.py) are the
bytes git and libgit2 write for the same content: checked against `git mktree`,
`git cat-file`, pygit2's `create_commit` and its reflog, and `git fsck --strict`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from conftest import assert_fsck, git
from server.base import fsops
from server.base.errors import Conflict
from server.base.records import to_json_bytes
from server.git.loose import LooseWriter
from server.git.objects import (
    TREE_MODE,
    BranchMoved,
    TreeEdit,
    commit_summary,
    encode_commit,
    encode_tree,
    move_branch,
    parse_tree,
    reflog_message,
    tree_entry,
)
from server.git.session import GitSession
from server.git.workdir.staging import DISK

META = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now"}
# Names whose order is git's, not Python's: a folder sorts as if its name ended in "/".
NAMES = ["a", "a.txt", "a-b", "a0", "b", "Z", "é.txt", "a b", "x.y.z", "a_"]


def _repo(tmp_path: Path) -> pygit2.Repository:
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path / "r")], check=True)
    return pygit2.Repository(str(tmp_path / "r"))


def _mktree(path: Path, lines: list[str]) -> str:
    done = subprocess.run(["git", "-C", str(path), "mktree"], input="".join(lines),
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_trees_are_the_bytes_git_mktree_writes(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    path = Path(repo.workdir)
    writer = LooseWriter(path / ".git" / "objects")
    blob = repo.create_blob(b"x\n")
    exe = repo.create_blob(b"#!/bin/sh\n")
    link = repo.create_blob(b"target")
    sub = repo.TreeBuilder()
    sub.insert("f", blob, FileMode.BLOB)
    sub_oid = sub.write()
    entries: dict[bytes, bytes] = {}
    lines = []
    for i, name in enumerate(NAMES):
        if i % 3 == 0:  # folders among the files: "a" is a folder, "a.txt" < "a/" < "a0"
            entries[name.encode()] = tree_entry(TREE_MODE, name.encode(), sub_oid.raw)
            lines.append(f"040000 tree {sub_oid}\t{name}\n")
        else:
            mode, oid = [(0o100644, blob), (0o100755, exe), (0o120000, link)][i % 3]
            entries[name.encode()] = tree_entry(mode, name.encode(), oid.raw)
            kind = "blob"
            lines.append(f"{mode:06o} {kind} {oid}\t{name}\n")
    raw = writer.write(b"tree", encode_tree(entries))
    assert raw.hex() == _mktree(path, lines)
    on_disk = subprocess.run(["git", "-C", str(path), "cat-file", "tree", raw.hex()],
                             capture_output=True, check=True).stdout
    assert on_disk == encode_tree(entries)
    assert parse_tree(on_disk) == entries
    assert [e.name for e in repo[pygit2.Oid(raw=raw)]] == \
        [e.name for e in repo[pygit2.Oid(hex=_mktree(path, lines))]]
    assert_fsck(path)


def test_a_tree_libgit2_wrote_parses_and_encodes_back(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    builder = repo.TreeBuilder()
    blob = repo.create_blob(b"y")
    for name in NAMES:
        builder.insert(name, blob, FileMode.BLOB)
    oid = builder.write()
    data = repo.odb.read(oid)[1]
    assert encode_tree(parse_tree(data)) == data


@pytest.mark.parametrize("offset", [0, 330, -480])
def test_commits_are_the_bytes_libgit2_writes(tmp_path: Path, offset: int) -> None:
    repo = _repo(tmp_path)
    writer = LooseWriter(Path(repo.path) / "objects")
    sig = pygit2.Signature("Bräid", "braid@localhost", 1_700_000_000, offset)
    tree = repo.TreeBuilder().write()
    first = repo.create_commit(None, sig, sig, "first\n", tree, [])
    second = repo.create_commit(None, sig, sig, "second\n", tree, [])
    for parents in ([], [first], [first, second]):
        message = "Tool batch: é\n\nBraid-Kind: tool-batch\n"
        theirs = repo.create_commit(None, sig, sig, message, tree, parents)
        ours = writer.write(b"commit", encode_commit(tree.raw, [p.raw for p in parents], sig,
                                                     sig, message))
        assert ours == theirs.raw
    assert_fsck(Path(repo.workdir))


def test_summaries_are_the_ones_libgit2_logs(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    sig = pygit2.Signature("Braid", "braid@localhost")
    tree = repo.TreeBuilder().write()
    tip = repo.create_commit("refs/heads/main", sig, sig, "first\n", tree, [])
    log = Path(repo.path) / "logs" / "refs" / "heads" / "main"
    for message in ["one line\n", "  lead  and   inner\n\nbody", "a\nb\n  \nc", "\n\nx\n",
                    "tab\there  \n", "two\nlines\n\nBraid-Kind: turn\n"]:
        tip = repo.create_commit("refs/heads/main", sig, sig, message, tree, [tip])
        logged = log.read_text().splitlines()[-1].split("\t", 1)[1]
        assert logged == reflog_message(message, 1), message
        assert logged == "commit: " + commit_summary(message)


def _session(tmp_path: Path, name: str) -> GitSession:
    return GitSession.create(tmp_path / name, {**META, "session_id": name * 32})


def test_a_branch_moves_as_libgit2_moves_it(tmp_path: Path) -> None:
    """The same commit through libgit2's create_commit and through move_branch: the same
    ref, the same reflog lines (the branch's and HEAD's)."""
    sig = pygit2.Signature("Braid", "braid@localhost", 1_700_000_000, 60)
    repos = [_repo(tmp_path / n) for n in ("ours", "theirs")]
    tips = []
    for repo in repos:
        tree = repo.TreeBuilder().write()
        tips.append(repo.create_commit("refs/heads/main", sig, sig, "first\n", tree, []))
    assert tips[0] == tips[1]
    ours, theirs = repos
    common = Path(ours.path)
    message = "Turn 1\n\nBraid-Kind: turn\n"
    for count in (1, 2):  # a commit, then a merge (logged "commit (merge)")
        parents = [tips[0]] * count
        tree = ours.TreeBuilder().write()
        raw = LooseWriter(common / "objects").write(b"commit", encode_commit(
            tree.raw, [p.raw for p in parents], sig, sig, message))
        assert move_branch(ours, common, "refs/heads/main", parents[0].raw, raw, sig,
                           reflog_message(message, len(parents)), True)
        made = theirs.create_commit("refs/heads/main", sig, sig, message, tree, parents)
        assert made.raw == raw
        tips = [made]
    for name in ("HEAD", "refs/heads/main", "logs/HEAD", "logs/refs/heads/main"):
        assert (common / name).read_bytes() == (Path(theirs.path) / name).read_bytes(), name
    assert not (common / "refs" / "heads" / "main.lock").exists()
    assert_fsck(Path(ours.workdir))


def test_a_checkpoint_is_logged(tmp_path: Path) -> None:
    git_ = _session(tmp_path, "a")
    git_.write_checkpoint({"workdir/a": b"a"}, summary="Turn 1", kind="turn")
    assert git(git_.path, "reflog", "-1", "--format=%gs").strip() == "commit: Turn 1"
    assert git(git_.path, "reflog", "-1", "--format=%gs", "main").strip() == "commit: Turn 1"
    assert_fsck(git_.path)


def test_a_checkpoint_refuses_a_moved_or_locked_branch(tmp_path: Path) -> None:
    git_ = _session(tmp_path, "c")
    tip = git_.head_oid()
    lock = git_.path / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text("x")
    with pytest.raises(Conflict):
        git_.write_checkpoint({"workdir/a": b"a"}, summary="s", kind="tool-batch")
    assert lock.read_text() == "x" and git_.head_oid() == tip  # another writer's lock kept
    lock.unlink()
    raw = git_.loose.write(b"commit", encode_commit(
        git_.repo[tip].tree_id.raw, [tip.raw], git_.signature, git_.signature, "other\n"))
    with pytest.raises(BranchMoved):
        move_branch(git_.repo, git_.common, "refs/heads/main", raw, raw, git_.signature,
                    "x", True)
    assert git_.head_oid() == tip and not lock.exists()
    git_.write_checkpoint({"workdir/a": b"a"}, summary="s", kind="tool-batch")
    assert git_.head_oid() != tip
    assert_fsck(git_.path)


def test_packed_refs_and_detached_heads_go_through_libgit2(tmp_path: Path) -> None:
    git_ = _session(tmp_path, "d")
    git(git_.path, "pack-refs", "--all")
    assert not (git_.path / ".git" / "refs" / "heads" / "main").exists()
    first = git_.write_checkpoint({"workdir/a": b"1"}, summary="packed", kind="tool-batch")
    assert git(git_.path, "rev-parse", "main").strip() == str(first)
    second = git_.write_checkpoint({"workdir/a": b"2"}, summary="loose", kind="tool-batch")
    assert git(git_.path, "rev-parse", "main").strip() == str(second)
    git(git_.path, "checkout", "-q", "--detach")
    third = git_.write_checkpoint({"workdir/a": b"3"}, summary="detached", kind="tool-batch")
    assert git(git_.path, "rev-parse", "HEAD").strip() == str(third)
    assert git(git_.path, "rev-parse", "main").strip() == str(second)
    assert_fsck(git_.path)


def test_checkpoint_trees_match_gits_and_the_cache_follows(tmp_path: Path) -> None:
    """A checkpoint's tree is the tree git builds from the same files (`git write-tree` of
    an index holding them), after adds, deletes, a file becoming a folder and back."""
    git_ = _session(tmp_path, "e")
    steps: list[dict[str, object]] = [
        {"workdir/a.txt": b"a", "workdir/a/b.txt": b"b", "workdir/a0": b"0",
         "history/000/00/000000-user-x.json": to_json_bytes({"n": 0})},
        {"workdir/a.txt": None, "workdir/x/y/z": b"z"},
        {"workdir/a": None, "workdir/a/b.txt": None},
        {"workdir/x/y/z": None},
    ]
    for changes in steps:
        git_.write_checkpoint(changes, summary="s", kind="tool-batch")
        head = str(git_.head_oid())
        # The index git reads from that commit, written back as a tree by git itself.
        env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "idx")}
        subprocess.run(["git", "-C", str(git_.path), "read-tree", head], env=env, check=True)
        again = subprocess.run(["git", "-C", str(git_.path), "write-tree"], env=env,
                               capture_output=True, text=True, check=True).stdout.strip()
        assert again == git(git_.path, "rev-parse", f"{head}^{{tree}}").strip()
    files = git(git_.path, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert files == ["history/000/00/000000-user-x.json", "session.json", "workdir/a0"]
    assert_fsck(git_.path)


def test_names_git_refuses_are_refused(tmp_path: Path) -> None:
    git_ = _session(tmp_path, "f")
    (git_.path / "workdir" / "ok").write_text("ok")
    for bad in (".git", ".GIT", "git~1", ".git."):
        with pytest.raises(pygit2.GitError):
            git_.tree_with(None, {f"workdir/{bad}/x": (git_.blob(b"x"), FileMode.BLOB)})
        with pytest.raises(pygit2.GitError):
            git_.tree_with(None, {f"workdir/{bad}": (git_.blob(b"x"), FileMode.BLOB)})
    fine = git_.write_checkpoint({"workdir/ok": DISK, "workdir/.gitignore": b"x",
                                  "workdir/é": b"y"}, summary="s", kind="tool-batch")
    assert git(git_.path, "ls-tree", "--name-only", str(fine), "workdir/").split() == \
        ["workdir/.gitignore", "workdir/ok", '"workdir/\\303\\251"']
    assert_fsck(git_.path)


def test_loose_objects_are_written_once_and_whole(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    objects = Path(repo.path) / "objects"
    writer = LooseWriter(objects)
    raw = writer.write(b"blob", b"hello\n")
    assert raw == repo.create_blob(b"hello\n").raw
    path = objects / raw.hex()[:2] / raw.hex()[2:]
    os.utime(path, (1, 1))
    assert writer.write(b"blob", b"hello\n") == raw
    assert path.stat().st_mtime > 1  # freshened, not rewritten
    # A folder `git prune-packed` emptied and removed is made again.
    path.chmod(0o644)
    path.unlink()
    path.parent.rmdir()
    assert writer.write(b"blob", b"hello\n") == raw and repo[pygit2.Oid(raw=raw)].data == \
        b"hello\n"
    leftovers = [p for p in objects.rglob("tmp_obj_*")]
    assert leftovers == []
    assert_fsck(Path(repo.workdir))


@pytest.mark.parametrize("supported", [True, False])
def test_renames_with_and_without_renameat2(tmp_path: Path, supported: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if not supported:
        monkeypatch.setattr(fsops, "_works", {1: False, 2: False})
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("new")
    b.write_text("old")
    assert fsops.rename_new(a, b) is False and a.read_text() == "new"
    fsops.replace(a, b)
    assert b.read_text() == "new" and not a.exists()
    a.write_text("first")
    assert fsops.rename_new(a, tmp_path / "c") is True and not a.exists()
    a.write_text("to a new name")
    fsops.replace(a, tmp_path / "d")
    assert (tmp_path / "d").read_text() == "to a new name"


def test_reflog_messages_say_initial_and_merge() -> None:
    assert reflog_message("x\n", 0) == "commit (initial): x"
    assert reflog_message("x\n", 1) == "commit: x"
    assert reflog_message("x\n", 2) == "commit (merge): x"


def test_an_edit_keeps_gits_order_with_or_without_a_sort(tmp_path: Path) -> None:
    """Random edits (new names before, between and after the others, files becoming
    folders and back, removals): the bytes are always git's (a sorted encode, and the tree
    `git mktree` writes for the final entries)."""
    import random

    rng = random.Random(9)
    repo = _repo(tmp_path)
    blob = repo.create_blob(b"x").raw
    folder = repo.TreeBuilder().write().raw
    names = [n.encode() for n in NAMES] + [b"%06d-user.json" % i for i in range(40)]
    entries: dict[bytes, bytes] = {}
    for _ in range(300):
        edit = TreeEdit(dict(entries))
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(names)
            if rng.random() < 0.2:
                edit.entries.pop(name, None)
            else:
                tree = rng.random() < 0.3
                edit.put(name, tree_entry(TREE_MODE if tree else 0o100644, name,
                                          folder if tree else blob))
        entries, data = edit.done()
        assert data == encode_tree(entries)
    lines = [f"{'040000 tree' if e.startswith(b'40000') else '100644 blob'} "
             f"{e[-20:].hex()}\t{n.decode()}\n" for n, e in entries.items()]
    raw = LooseWriter(Path(repo.path) / "objects").write(b"tree", data)
    assert raw.hex() == _mktree(Path(repo.workdir), lines)
