"""`GitSession` on real repositories in temp folders, checked with the git CLI: checkpoints
rebuild only the trees on changed paths, carry their trailers, shard the history, and refuse
to move a branch that moved under them."""

from __future__ import annotations

import json
import os
from itertools import accumulate
from pathlib import Path

import pygit2
import pytest

from conftest import assert_fsck, git
from server.base.errors import Conflict, NotFound
from server.base.records import to_json_bytes
from server.git.commits import commit_message, parse_trailers
from server.git.history import HISTORY, history_path, run_path
from server.git.session import GitSession
from server.git.workdir.staging import DISK
from server.store import atomic, layout
from server.store.context import estimate

META = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now",
        "forked_from_session_id": None, "root_session_id": "0" * 32}


@pytest.fixture
def repo(tmp_path: Path) -> GitSession:
    return GitSession.create(tmp_path / "s", META)


def tree_oid(repo_path: Path, rev: str, path: str) -> str:
    return git(repo_path, "rev-parse", f"{rev}:{path}").strip()


def trailers(repo_path: Path, rev: str) -> dict[str, str]:
    body = git(repo_path, "log", "-1", "--format=%(trailers:only,unfold)", rev)
    out = {}
    for line in body.splitlines():
        key, _, value = line.partition(": ")
        if key:
            out[key] = value
    return out


def message(seq: int, role: str = "user") -> tuple[str, bytes]:
    msg_id = f"{seq:032x}"
    body = {"id": msg_id, "role": role, "content": f"m{seq}", "run_id": "r" * 32,
            "created_at": "now"}
    return history_path(seq, role, msg_id), to_json_bytes(body)


def test_create_is_one_clean_commit(repo: GitSession) -> None:
    path = repo.path
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(path, "rev-list", "--count", "HEAD").strip() == "1"
    assert json.loads(git(path, "show", "HEAD:session.json")) == META
    assert trailers(path, "HEAD") == {"Braid-Kind": "user-edit"}
    assert (path / "workdir").is_dir()
    assert "/_worktrees/" in (path / ".git" / "info" / "exclude").read_text()
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_checkpoint_touches_only_the_changed_subtrees(repo: GitSession) -> None:
    path = repo.path
    seed = {f"workdir/{d}/f{i}.txt": f"{d}{i}\n".encode() for d in "abc" for i in range(20)}
    seed.update(dict(message(s) for s in range(5)))
    repo.write_checkpoint(seed, summary="seed", kind="tool-batch", run_id="r1", message_index=5)
    before = git(path, "rev-parse", "HEAD").strip()

    repo.write_checkpoint({"workdir/b/f3.txt": b"changed\n", "workdir/b/new.txt": b"new\n"},
                          summary="edit b", kind="tool-batch", run_id="r1", message_index=5)
    after = git(path, "rev-parse", "HEAD").strip()

    # Untouched subtrees are the very same tree objects: nothing outside the path was rebuilt.
    for sub in ("workdir/a", "workdir/c", "history", "history/000",
                "history/000/00", "session.json"):
        assert tree_oid(path, before, sub) == tree_oid(path, after, sub), sub
    for sub in ("workdir", "workdir/b"):
        assert tree_oid(path, before, sub) != tree_oid(path, after, sub), sub
    changed = git(path, "diff", "--name-status", before, after).split("\n")
    assert sorted(filter(None, changed)) == ["A\tworkdir/b/new.txt", "M\tworkdir/b/f3.txt"]
    assert (path / "workdir/b/f3.txt").read_bytes() == b"changed\n"
    # The index was kept in step, so git tells the truth between turns.
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "diff", "--cached", "--name-only") == ""
    assert_fsck(path)


def test_delete_removes_file_and_empty_folders(repo: GitSession) -> None:
    path = repo.path
    repo.write_checkpoint({"workdir/d/e/only.txt": b"x\n", "workdir/keep.txt": b"k\n"},
                          summary="add", kind="tool-batch")
    repo.write_checkpoint({"workdir/d/e/only.txt": None}, summary="rm", kind="tool-batch")
    assert not (path / "workdir/d/e/only.txt").exists()
    listing = git(path, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "workdir/keep.txt" in listing
    assert not any(p.startswith("workdir/d") for p in listing)
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_disk_changes_keep_mode_and_symlinks(repo: GitSession) -> None:
    path = repo.path
    work = path / "workdir"
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    os.symlink("run.sh", work / "link")
    repo.write_checkpoint({"workdir/run.sh": DISK, "workdir/link": DISK,
                           "workdir/missing.txt": DISK}, summary="disk", kind="user-edit")
    entries = {line.split("\t")[1]: line.split()[0]
               for line in git(path, "ls-tree", "-r", "HEAD", "workdir").splitlines()}
    assert entries == {"workdir/run.sh": "100755", "workdir/link": "120000"}
    assert git(path, "show", "HEAD:workdir/link") == "run.sh"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_trailers_written_and_parsed(repo: GitSession) -> None:
    oid = repo.write_checkpoint({"workdir/a.txt": b"a\n"}, summary="Tools: write_file a.txt",
                                kind="tool-batch", run_id="abc123", message_index=3)
    path = repo.path
    assert git(path, "log", "-1", "--format=%s").strip() == "Tools: write_file a.txt"
    assert trailers(path, "HEAD") == {
        "Braid-Kind": "tool-batch", "Braid-Run": "abc123", "Braid-Message-Index": "3"}
    info = repo.commit_info(oid)
    assert (info.kind, info.run_id, info.message_index) == ("tool-batch", "abc123", 3)
    assert info.parent_id == info.parent_ids[0] == git(path, "rev-parse", "HEAD~1").strip()
    assert info.summary == "Tools: write_file a.txt"
    # Only the first line of a summary is used; a message index of 0 is still written.
    text = commit_message("line one\nline two", "turn", "r", 0)
    assert text == "line one\n\nBraid-Kind: turn\nBraid-Run: r\nBraid-Message-Index: 0\n"
    assert parse_trailers(text) == {"Braid-Kind": "turn", "Braid-Run": "r",
                                    "Braid-Message-Index": "0"}


def test_history_path_shards_by_hundred() -> None:
    assert history_path(0, "user", "m") == "history/000/00/000000-user-m.json"
    assert history_path(99, "tool", "m") == "history/000/00/000099-tool-m.json"
    assert history_path(100, "assistant", "m") == "history/000/01/000100-assistant-m.json"
    assert history_path(12_345, "user", "m") == "history/001/23/012345-user-m.json"
    assert run_path(0, "r") == "runs/000/00/r.json"
    assert run_path(1000, "r") == "runs/000/10/r.json"
    assert run_path(10_100, "r") == "runs/001/01/r.json"
    # The earlier layout, which old sessions keep.
    assert history_path(1000, "user", "m", legacy=True) == "history/001/001000-user-m.json"
    assert run_path(1000, "r", legacy=True) == "runs/001/r.json"


def test_no_history_folder_holds_more_than_a_hundred(repo: GitSession) -> None:
    path = repo.path
    first = dict(message(s) for s in range(150))
    repo.write_checkpoint(first, summary="first", kind="turn")
    assert layout.next_seq(repo) == 150
    rest = dict(message(s, "assistant") for s in range(150, 201))
    repo.write_checkpoint(rest, summary="rest", kind="turn")
    assert layout.next_seq(repo) == 201
    assert git(path, "ls-tree", "--name-only", "HEAD", "history/").split() == ["history/000"]
    assert git(path, "ls-tree", "--name-only", "HEAD", "history/000/").split() == [
        "history/000/00", "history/000/01", "history/000/02"]
    assert len(git(path, "ls-tree", "--name-only", "HEAD", "history/000/01/").split()) == 100
    assert git(path, "ls-tree", "--name-only", "HEAD", "history/000/02/").split() == [
        history_path(200, "assistant", f"{200:032x}")]
    contents = [m["content"] for m in layout.messages(repo)]
    assert contents == [f"m{s}" for s in range(201)]
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_a_new_checkpoint_shares_the_listing_and_changes_nothing_held(repo: GitSession) -> None:
    """A checkpoint's listing shares its source's unchanged folders (no per-message copy:
    issue 30), and the messages, files and sums a caller holds stay as they were."""
    repo.write_checkpoint(dict(message(s) for s in range(250)), summary="a", kind="turn")
    before = repo.head_commit()
    held, held_sums = layout.messages(repo), layout.message_sums(repo)
    held_files = layout.message_files(repo)
    repo.write_checkpoint(dict(message(s, "assistant") for s in range(250, 252)),
                          summary="b", kind="turn")
    after = repo.head_commit()
    now, sums = layout.messages(repo), layout.message_sums(repo)
    assert [m["content"] for m in held] == [f"m{s}" for s in range(250)]
    assert len(held_files) == 250 and len(held_sums) == 251
    assert [m["content"] for m in now] == [f"m{s}" for s in range(252)]
    assert [m["content"] for m in reversed(now)][:3] == ["m251", "m250", "m249"]
    assert now[-1]["content"] == "m251" and now[100:102] == [now[100], now[101]]
    assert list(sums) == [0, *accumulate(estimate(m) for m in now)]
    assert list(held_sums) == list(sums)[:251]
    # The git CLI names the same files, in the same order.
    listed = git(repo.path, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    assert [f.path for f in layout.message_files(repo)] == listed
    old = repo.listings.get(HISTORY, before.tree["history"])
    new = repo.listings.get(HISTORY, after.tree["history"])
    assert old.folders[:2] == new.folders[:2] and old.folders[0] is new.folders[0]
    assert old.folders[2] is not new.folders[2]
    assert layout.find_run_path(repo, "nope") is None


class MovedUnderneath(GitSession):
    """A writer that another writer overtakes between reading the tip and committing."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.racer: GitSession | None = None

    def _rebuild(self, tree, nested):  # type: ignore[no-untyped-def]
        # Called after the old tip was read and before the commit: the racer commits here.
        if self.racer is not None:
            racer, self.racer = self.racer, None
            racer.write_checkpoint({"workdir/other.txt": b"other\n"}, summary="other",
                                   kind="user-edit")
        return super()._rebuild(tree, nested)


def test_checkpoint_refuses_when_the_branch_moved(repo: GitSession) -> None:
    path = repo.path
    slow = MovedUnderneath(path)
    slow.racer = GitSession(path)
    with pytest.raises(Conflict):
        slow.write_checkpoint({"workdir/mine.txt": b"mine\n"}, summary="mine", kind="turn")
    # The other writer's commit stands; nothing was silently overwritten.
    assert git(path, "log", "-1", "--format=%s").strip() == "other"
    assert git(path, "rev-list", "--count", "HEAD").strip() == "2"
    assert git(path, "show", "HEAD:workdir/other.txt") == "other\n"
    assert_fsck(path)


def test_readers_and_branches(repo: GitSession) -> None:
    path = repo.path
    run = {"run_id": "r1", "status": "COMPLETED"}
    repo.write_checkpoint({run_path(0, "r1"): to_json_bytes(run), "workdir/x.txt": b"x\n"},
                          summary="turn", kind="turn", run_id="r1", message_index=0)
    assert list(layout.runs(repo)) == [run]
    assert layout.find_run_path(repo, "r1") == "runs/000/00/r1.json"
    assert layout.find_run_path(repo, "nope") is None
    assert layout.run_count(repo) == 1
    assert set(repo.workdir_files()) == {"x.txt"}
    head = repo.head_oid()
    repo.create_branch("run/r2", head)
    with pytest.raises(Conflict):
        repo.create_branch("run/r2", head)
    atomic.checkout(repo, "run/r2")
    assert repo.branch == "run/r2"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "run/r2"
    assert set(repo.branches()) == {"main", "run/r2"}
    with pytest.raises(NotFound):
        atomic.checkout(repo, "nope")
    with pytest.raises(NotFound):
        repo.commit("not-a-rev")
    assert isinstance(repo.head_commit(), pygit2.Commit)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_path_turning_between_file_and_folder(repo: GitSession, reverse: bool) -> None:
    """Tools and user edits report `a` and `a/x` in any order; the tree must follow the disk."""
    path = repo.path
    work = path / "workdir"

    def both() -> dict[str, object]:
        changes: dict[str, object] = {"workdir/a/x": DISK, "workdir/a": DISK}
        return dict(reversed(list(changes.items()))) if reverse else changes

    repo.write_checkpoint({"workdir/a": b"file\n"}, summary="file", kind="turn")
    (work / "a").unlink()
    (work / "a").mkdir()
    (work / "a/x").write_text("x\n")
    repo.write_checkpoint(both(), summary="file to folder", kind="user-edit")
    assert git(path, "ls-tree", "-r", "--name-only", "HEAD", "workdir").split() == ["workdir/a/x"]
    assert git(path, "status", "--porcelain") == ""

    (work / "a/x").unlink()
    (work / "a").rmdir()
    (work / "a").write_text("again\n")
    repo.write_checkpoint(both(), summary="folder to file", kind="user-edit")
    assert git(path, "ls-tree", "-r", "--name-only", "HEAD", "workdir").split() == ["workdir/a"]
    assert git(path, "show", "HEAD:workdir/a") == "again\n"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)
