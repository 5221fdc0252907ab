"""git/lookup.py: lookups by name that agree with pygit2's own (`tree[name]`, `TreeBuilder.remove`,
`references.get`, `create_blob_fromdisk`) without keeping the name alive, and a turn's git
work (checkpoints, backups, reads) that leaves nothing of itself behind once the session is
closed (issue 11: pygit2's leaked names pinned the heap after a burst of turns)."""

from __future__ import annotations

import gc
import os
import random
import sys
import tracemalloc
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from conftest import assert_fsck
from server.base.records import to_json_bytes
from server.git import lookup
from server.git.history import history_path, run_path
from server.git.session import GitSession
from server.git.trees import file_at
from server.git.workdir.staging import DISK
from server.store.backups import BackupStore

META = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now",
        "forked_from_session_id": None, "root_session_id": "0" * 32}
# Names whose order differs as files and as folders ('/' sorts after '-', '.', ' ').
NAMES = ["a", "a.b", "a-b", "a b", "a0", "ab", "b", "A", "_", "z", "é", "ü.txt", "0"]
FOLDERS = {"a", "ab", "é", "0"}


def fresh(text: str) -> str:
    """An equal string that is a new object (not a literal the module keeps)."""
    return "".join(list(text))


def tricky_tree(repo: pygit2.Repository) -> pygit2.Tree:
    blob = repo.create_blob(b"x\n")
    inner = repo.TreeBuilder()
    inner.insert("f", blob, FileMode.BLOB)
    inner_id = inner.write()
    builder = repo.TreeBuilder()
    for name in NAMES:
        if name in FOLDERS:
            builder.insert(name, inner_id, FileMode.TREE)
        else:
            builder.insert(name, blob, FileMode.BLOB)
    return repo[builder.write()]


def test_lookups_agree_with_pygit2(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    tree = tricky_tree(repo)
    for name in [*NAMES, "nope", "a.c", "aa", "", "a/f", "é/f"]:
        want = tree[name] if name and name in tree else None
        got = lookup.at_path(tree, name) if name else None
        assert (got.id, got.filemode) == (want.id, want.filemode) if want else got is None
        if "/" not in name:
            sub = lookup.subtree(tree, name)
            assert (sub is not None) == (name in FOLDERS)
    assert lookup.entry(None, "a") is None and lookup.subtree(None, "a") is None


def test_without_is_treebuilder_remove(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    tree = tricky_tree(repo)
    rnd = random.Random(11)
    for k in range(1, len(NAMES) + 1):
        names = rnd.sample(NAMES, k)
        builder = repo.TreeBuilder(tree)
        for name in names:
            builder.remove(name)
        assert lookup.without(repo, tree, [*names, "absent"]).id == builder.write()
    assert lookup.without(repo, tree, ["absent"]).id == tree.id


def test_refs_and_blobs_agree_with_pygit2(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    tree = tricky_tree(repo)
    sig = pygit2.Signature("t", "t@t")
    commit = repo.create_commit("refs/heads/main", sig, sig, "m", tree.id, [])
    repo.references.create("refs/braid/backups/x1", commit)
    assert lookup.branch_target(repo, "main") == commit
    assert lookup.branch_target(repo, "nope") is None
    assert lookup.branch_target(repo, "..bad..") is None
    assert lookup.ref_commit(repo, "refs/braid/backups/x1").id == commit
    assert lookup.ref_commit(repo, "refs/braid/backups/x2") is None
    main = lookup.reference(repo, "refs/heads/main")
    assert main is not None and main.name == "refs/heads/main" and main.target == commit
    other = lookup.reference(repo, "refs/braid/backups/x1")
    assert other is not None and other.target == commit
    assert lookup.reference(repo, "refs/heads/nope") is None
    assert lookup.reference(repo, "refs/braid/backups/x2") is None
    for data in (b"plain\n", b"crlf\r\n", b"$Id$\n", b"", bytes(range(256))):
        path = tmp_path / "r" / "f.bin"
        path.write_bytes(data)
        assert lookup.blob_from_disk(repo, path) == repo.create_blob_fromdisk(str(path))


def test_no_name_is_kept_alive(tmp_path: Path) -> None:
    """What pygit2's own calls fail: each keeps one more reference to its argument."""
    repo = pygit2.init_repository(str(tmp_path / "r"))
    tree = tricky_tree(repo)
    sig = pygit2.Signature("t", "t@t")
    repo.create_commit("refs/heads/main", sig, sig, "m", tree.id, [])
    (tmp_path / "r" / "f.txt").write_text("f\n")
    calls = [
        lambda n: lookup.entry(tree, n), lambda n: lookup.subtree(tree, n),
        lambda n: lookup.at_path(tree, n + "/f"), lambda n: lookup.without(repo, tree, [n]),
        lambda n: lookup.branch_target(repo, "main" if n == "a" else n),
        lambda n: lookup.ref_commit(repo, "refs/heads/" + n),
        lambda n: lookup.reference(repo, n),  # neither a branch nor another ref's name
    ]
    for call in calls:
        name = fresh("a")
        before = sys.getrefcount(name)
        for _ in range(5):
            call(name)
        assert sys.getrefcount(name) == before
    path = fresh(str(tmp_path / "r" / "f.txt"))
    before = sys.getrefcount(path)
    lookup.blob_from_disk(repo, path)
    assert sys.getrefcount(path) == before


def one_turn(git: GitSession, n: int) -> None:
    """A turn's git work as turns.py does it: back up, write the file, checkpoint the
    messages and run record, read them back, delete a file."""
    run_id = f"{n:032x}"
    backups = BackupStore(git)
    target = git.path / "workdir" / fresh(f"dir{n}/f{n}.txt")
    backups.backup_before_edit(run_id, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"file {n}\n")
    hist = history_path(n + 1, "assistant", fresh(f"{n:032x}"))
    record = run_path(n + 1, run_id)
    git.write_checkpoint({hist: to_json_bytes({"n": n}), record: to_json_bytes({"r": n}),
                          fresh(f"workdir/dir{n}/f{n}.txt"): DISK},
                         summary="turn", kind="turn", run_id=run_id)
    assert git.read_json(git.head_commit(), fresh(hist)) == {"n": n}
    assert sorted(backups.manifest(run_id)) == [f"dir{n}/f{n}.txt"]
    assert file_at(git.head_commit().tree, fresh(f"workdir/dir{n}/f{n}.txt")) is not None
    git.branch_tip(fresh("main"))
    if n % 2:
        git.write_checkpoint({fresh(f"workdir/dir{n}/f{n}.txt"): None}, summary="rm",
                             kind="tool-batch", run_id=run_id)


def test_a_turns_git_work_leaves_nothing_behind(tmp_path: Path) -> None:
    git = GitSession.create(tmp_path / "s", META)
    one_turn(git, 0)  # first use: module-level caches, compiled regexes
    tracemalloc.start(4)
    try:
        before = tracemalloc.take_snapshot()
        for n in range(1, 31):
            one_turn(git, n)
        git.index.flush()
        git.close()
        git.repo.free()
        del git
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ours = [tracemalloc.Filter(True, f"{os.sep}*server{os.sep}core{os.sep}*")]
    left = [s for s in after.filter_traces(ours).compare_to(before.filter_traces(ours),
                                                            "traceback")
            if s.count_diff > 0]
    # 30 turns: a leak is at least one object a turn; a few one-off objects may stay.
    assert sum(s.count_diff for s in left) < 10, "\n".join(
        f"{s.count_diff} {s.traceback}" for s in left[:5])
    assert_fsck(tmp_path / "s")
