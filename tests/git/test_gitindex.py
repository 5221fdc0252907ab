"""Braid's own index writer (`git/workdir/index_file.py`) on real repositories, checked with
the git CLI and with libgit2: it reads what git writes (v2, v3 with skip-worktree, v4), writes what
both read, keeps real stat data, sets skip-worktree, and is right under racy git."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2
import pytest

from conftest import assert_fsck, git
from server.git.workdir.index_file import GitIndex
from server.git.workdir.index_format import IndexFormatError, IndexLocked, tree_entries

OLD = time.time() - 3600  # an mtime well outside the racy window


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
        os.utime(path / rel, (OLD, OLD))
    git(path, "add", "-A")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path


FILES = {"session.json": "{}\n", "history/000/00/000000-user-a.json": "1\n",
         "history/000/00/000001-assistant-b.json": "2\n", "runs/000/00/r.json": "3\n",
         "workdir/a.txt": "a\n", "workdir/sub/b.txt": "b\n", "workdir/sub/c d.txt": "c\n"}


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_reads_what_git_writes_and_writes_it_back(tmp_path: Path, version: str) -> None:
    path = make_repo(tmp_path / "r", FILES)
    git(path, "update-index", "--index-version", version)
    if version == "3":
        git(path, "update-index", "--skip-worktree", "runs/000/00/r.json")
    before = git(path, "ls-files", "-s", "-t")
    index = GitIndex(path / ".git" / "index", path)
    assert len(index) == len(FILES)
    assert sorted(index.paths("workdir/")) == ["workdir/a.txt", "workdir/sub/b.txt",
                                               "workdir/sub/c d.txt"]
    assert index.get("runs/000/00/r.json")[2] is (version == "3")
    index.write()
    assert git(path, "ls-files", "-s", "-t") == before
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "diff-files", "--name-only") == ""  # the stat data is still real
    assert_fsck(path)
    repo = pygit2.Repository(str(path))
    repo.index.read(True)
    assert sorted(e.path for e in repo.index) == sorted(FILES)


def test_skip_worktree_entries_off_disk(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "r", FILES)
    repo = pygit2.Repository(str(path))
    index = GitIndex(path / ".git" / "index", path)
    index.reset(tree_entries(repo.head.peel(pygit2.Commit).tree, "", ("history/", "runs/")))
    index.write()
    for rel in FILES:
        if rel.startswith(("history/", "runs/")):
            (path / rel).unlink()
    assert sorted(p for p, _ in (line.split(" ", 1)[::-1] for line in
                  git(path, "ls-files", "-t").splitlines()) if _ == "S") == sorted(
        r for r in FILES if r.startswith(("history/", "runs/")))
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "diff-files", "--name-only") == ""  # kept stat data on reset
    assert_fsck(path)
    # A new entry with skip-worktree, a removal, and libgit2 keeps the bits it read.
    blob = repo.create_blob(b"new\n")
    index.set("history/000/00/000002-user-c.json", blob, pygit2.enums.FileMode.BLOB,
              skip=True)
    index.remove("workdir/a.txt")
    (path / "workdir/a.txt").unlink()
    index.write()
    out = git(path, "status", "--porcelain")
    assert out == "A  history/000/00/000002-user-c.json\nD  workdir/a.txt\n", out
    lib = repo.index
    lib.read(True)
    (path / "workdir/e.txt").write_text("e\n")
    lib.add("workdir/e.txt")
    lib.write()
    assert "S history/000/00/000002-user-c.json" in git(path, "ls-files", "-t")


@pytest.mark.slow
def test_on_disk_jumps_over_the_off_disk_folders_and_names_the_same(tmp_path: Path) -> None:
    """A fork copies what `on_disk` names; jumping over history/ and runs/ (most of a long
    session's index: issue 30) names exactly the files git has on disk, with their ids."""
    files = {**FILES, "aaa.txt": "first\n", "rung.txt": "after runs/\n", "zz/last.txt": "z\n"}
    path = make_repo(tmp_path / "r", files)
    repo = pygit2.Repository(str(path))
    index = GitIndex(path / ".git" / "index", path)
    index.reset(tree_entries(repo.head.peel(pygit2.Commit).tree, "", ("history/", "runs/")))
    index.write()
    on_disk = {}
    for line in git(path, "ls-files", "-s", "-t").splitlines():
        tag, mode, oid, rest = line.split(" ", 3)
        if tag == "H":
            on_disk[rest.split("\t", 1)[1]] = oid
    assert "runs/000/00/r.json" not in on_disk and "rung.txt" in on_disk
    whole = [(rel, str(oid)) for rel, oid, _, _ in index.on_disk()]
    assert whole == sorted(on_disk.items())
    jumped = [(rel, str(oid)) for rel, oid, _, _ in index.on_disk(("history/", "runs/"))]
    assert jumped == whole
    assert list(index.on_disk(("runs/", "history/", "none/"))) == list(index.on_disk())


def test_racy_entries_are_rehashed(tmp_path: Path) -> None:
    """A file changed in the same tick as the lstat that staged it (same size, same mtime)
    must not look clean to git."""
    path = make_repo(tmp_path / "r", {"workdir/a.txt": "aaaa\n"})
    target = path / "workdir" / "a.txt"
    target.write_text("bbbb\n")
    st = os.lstat(target)
    repo = pygit2.Repository(str(path))
    index = GitIndex(path / ".git" / "index", path)
    index.set("workdir/a.txt", repo.create_blob(b"bbbb\n"), pygit2.enums.FileMode.BLOB, st)
    target.write_text("cccc\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same tick, the same size
    index.write()
    time.sleep(1.1)  # git compares whole seconds: the index is a second newer than the file
    index.write()  # a later write is still right
    # ctime changed with the utime: git is told not to trust it, so only the smudge tells.
    assert git(path, "-c", "core.trustctime=false", "status", "--porcelain") == \
        "MM workdir/a.txt\n"


def test_racy_entries_get_their_stat_back(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "r", {"workdir/a.txt": "aaaa\n"})
    target = path / "workdir" / "a.txt"
    target.write_text("bbbb\n")
    st = os.lstat(target)
    repo = pygit2.Repository(str(path))
    index = GitIndex(path / ".git" / "index", path)
    index.set("workdir/a.txt", repo.create_blob(b"bbbb\n"), pygit2.enums.FileMode.BLOB, st,
              taken=time.time() - 10)  # as if staged long ago: unsmudged at the write
    index.write()
    assert git(path, "diff-files", "--name-only") == ""
    assert git(path, "status", "--porcelain") == "M  workdir/a.txt\n"


def test_refresh_after_git_writes(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "r", FILES)
    index = GitIndex(path / ".git" / "index", path)
    (path / "workdir/new.txt").write_text("n\n")
    git(path, "add", "workdir/new.txt")
    assert "workdir/new.txt" not in index
    assert index.refresh() and "workdir/new.txt" in index
    assert not index.refresh()


def test_refuses_what_it_does_not_keep(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "r", FILES)
    git(path, "update-index", "--split-index")
    with pytest.raises(IndexFormatError):
        GitIndex(path / ".git" / "index", path)
    (path / ".git" / "index").write_bytes(b"DIRC garbage")
    with pytest.raises(IndexFormatError):
        GitIndex(path / ".git" / "index", path)


def test_a_held_lock_is_not_broken(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "r", FILES)
    index = GitIndex(path / ".git" / "index", path)
    (path / ".git" / "index.lock").write_bytes(b"")
    with pytest.raises(IndexLocked):
        index.write()
    assert (path / ".git" / "index.lock").exists()
    (path / ".git" / "index.lock").unlink()
    index.write()
    assert git(path, "status", "--porcelain") == ""


def test_sorted_entries_match_a_sorted_dict_through_random_changes() -> None:
    import random

    from server.git.workdir.index_format import SortedEntries

    class Small(SortedEntries):
        CHUNK = 4  # chunks split and empty out often

    rng = random.Random(9)
    keys = sorted({f"k{rng.randrange(500):03d}".encode() for _ in range(60)})
    store = Small(keys, [k + b"!" for k in keys])
    model = {k: k + b"!" for k in keys}
    for step in range(3000):
        key = f"k{rng.randrange(500):03d}".encode()
        if rng.random() < 0.45:
            assert store.remove(key) == model.pop(key, None)
        else:
            blob = key + str(step).encode()
            assert store.put(key, blob) == model.get(key)
            model[key] = blob
        if step % 97 == 0:
            assert list(store.items()) == sorted(model.items())
            assert b"".join(store.pieces()) == b"".join(v for _, v in sorted(model.items()))
            assert [k for k, _ in store.items(b"k1")] == sorted(k for k in model
                                                                if k.startswith(b"k1"))
    assert len(store) == len(model) and store.flat() == (sorted(model),
                                                        [model[k] for k in sorted(model)])
