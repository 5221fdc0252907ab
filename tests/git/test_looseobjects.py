"""A checkpoint's loose objects are made in memory and their files written together at its
end, on a few threads (git/loose.py): checked with the git CLI, and under kill -9."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pygit2
import pytest

from conftest import assert_fsck, git
from server.agent.interrupted import clear_stale_locks
from server.base import crash
from server.base.pools import IdlingThreadPool
from server.git.loose import LooseWriter
from server.git.session import GitSession
from server.git.workdir.index_format import clear_stale_lock
from server.git.workdir.staging import DISK

META = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now"}
ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path / "r")], check=True)
    return tmp_path / "r"


def _there(repo: Path, raw: bytes) -> bool:
    return subprocess.run(["git", "-C", str(repo), "cat-file", "-e", raw.hex()],
                          capture_output=True).returncode == 0


def test_a_batch_is_written_at_its_end_on_several_threads(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    pool = IdlingThreadPool(3, 5.0, name="test-objects")
    writer = LooseWriter(repo / ".git" / "objects", pool)
    writer.begin()
    made = {writer.write(b"blob", b"blob %d\n" % i): b"blob %d\n" % i for i in range(20)}
    writer.write(b"blob", b"blob 3\n")  # twice in one batch: one file
    assert not any(_there(repo, raw) for raw in made)  # nothing on disk yet
    writer.finish()
    assert pool.threads() >= 1  # the other shares went to the pool's threads
    for raw, data in made.items():
        assert git(repo, "cat-file", "-p", raw.hex()).encode() == data
    assert list((repo / ".git" / "objects").rglob("tmp_obj_*")) == []
    # Out of a batch, a write is on disk when it returns.
    raw = writer.write(b"blob", b"alone\n")
    assert _there(repo, raw)
    assert_fsck(repo)
    pool.shutdown()


def test_settle_writes_what_is_kept_and_keeps_on(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    writer = LooseWriter(repo / ".git" / "objects")
    writer.settle()  # outside a batch: nothing to do, and no batch begins
    assert _there(repo, writer.write(b"blob", b"a\n"))
    writer.begin()
    first = writer.write(b"blob", b"b\n")
    writer.settle()
    assert _there(repo, first)
    second = writer.write(b"blob", b"c\n")
    assert not _there(repo, second)
    writer.finish()
    assert _there(repo, second)


def test_a_failed_write_is_raised_after_the_others_are_written(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    objects = repo / ".git" / "objects"
    blocked = hashlib.sha1(b"blob 8\0blocked\n").hexdigest()
    (objects / blocked[:2]).write_text("a file where git's fan-out folder goes")
    pool = IdlingThreadPool(3, 5.0, name="test-objects")
    writer = LooseWriter(objects, pool)
    writer.begin()
    others = [writer.write(b"blob", b"other %d\n" % i) for i in range(12)]
    others = [raw for raw in others if raw.hex()[:2] != blocked[:2]]
    writer.write(b"blob", b"blocked\n")
    with pytest.raises(NotADirectoryError):
        writer.finish()
    assert all(_there(repo, raw) for raw in others)
    assert _there(repo, writer.write(b"blob", b"after\n"))  # the batch is over
    pool.shutdown()


def test_a_checkpoints_objects_are_on_disk_before_its_branch_moves(tmp_path: Path) -> None:
    git_ = GitSession.create(tmp_path / "s", META)
    tip = git_.head_oid()
    (git_.path / "workdir" / "f.txt").write_text("one\n")
    crash.arm("checkpoint.before_commit", "raise")
    try:
        with pytest.raises(crash.CrashPoint):
            git_.write_checkpoint({"workdir/f.txt": DISK, "history/000/00/0-user-x.json": b"{}"},
                                  summary="s", kind="tool-batch")
    finally:
        crash.arm(None)
    assert git_.head_oid() == tip  # the branch did not move
    # The index was written with the new entries: their blobs are there, the repo is valid.
    assert git(git_.path, "cat-file", "-p", ":workdir/f.txt") == "one\n"
    assert git(git_.path, "cat-file", "-p", ":history/000/00/0-user-x.json") == "{}"
    assert_fsck(git_.path)
    git_.index.reset()  # as recovery does after a failed operation
    oid = git_.write_checkpoint({"workdir/f.txt": DISK}, summary="again", kind="tool-batch")
    assert git(git_.path, "show", f"{oid}:workdir/f.txt") == "one\n"
    assert git(git_.path, "status", "--porcelain") == ""
    assert_fsck(git_.path)


def test_a_branch_not_checked_out_gets_its_commit_whole(tmp_path: Path) -> None:
    git_ = GitSession.create(tmp_path / "s", META)
    git_.create_branch("other", git_.head_oid())
    oid = git_.commit_on_branch("other", {"workdir/é.txt": b"x\n", "session.json": b"{}\n"},
                                summary="tree only", kind="user-edit")
    assert str(git_.branch_tip("other")) == str(oid)
    assert git(git_.path, "show", "other:workdir/é.txt") == "x\n"
    assert_fsck(git_.path)


_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from server.git.session import DISK, GitSession
    git = GitSession(Path(sys.argv[1]))
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        (git.path / "workdir" / f"f{i % 7}.txt").write_text(f"{i}\\n" * 50)
        git.write_checkpoint({f"workdir/f{i % 7}.txt": DISK,
                              f"history/000/00/{i}-user-{i:032x}.json": b"%d\\n" % i},
                             summary=f"c{i}", kind="tool-batch", sync_index=i % 3 == 0)
""")


@pytest.mark.slow
def test_killed_anywhere_in_checkpoints_the_repository_stays_valid(tmp_path: Path) -> None:
    """kill -9 at moments spread over a stream of checkpoints: each time git reads every
    commit whole (fsck --strict), and the session opens and commits again."""
    path = tmp_path / "s"
    GitSession.create(path, META)
    for delay in (0.05, 0.13, 0.21, 0.34, 0.47):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(ROOT)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert_fsck(path)
        git(path, "log", "--format=%H", "-n", "1")
        # What a server started after the dead one does: its locks are older than it, and
        # the open (index.lock: a kill while the index was rewritten) then recovery
        # (`main.lock`: a kill between taking the branch's lock and putting it in place)
        # remove them.
        died = time.time()
        clear_stale_lock(path / ".git" / "index.lock", before=died)
        reopened = GitSession(path)
        clear_stale_locks(reopened, before=died)
        reopened.index.reset()
        (path / "workdir" / "after.txt").write_text(f"{delay}\n")
        oid = reopened.write_checkpoint({"workdir/after.txt": DISK}, summary="after",
                                        kind="user-edit")
        assert reopened.repo[oid].peel(pygit2.Commit).tree.id == \
            pygit2.Oid(hex=git(path, "rev-parse", "HEAD^{tree}").strip())
        assert_fsck(path)
        reopened.repo.free()
