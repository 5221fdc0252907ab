"""`history/` and `runs/` kept off disk (staging.py): in git and in the index (skip-worktree),
never in the working tree, and `git status` clean between turns, after time travel, a fork,
a revert and a recovery; sessions written with their history on disk are converted when
opened, losing nothing. Checked with the git CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pygit2

from conftest import assert_fsck, git, new_session, run_turn
from server.app.braid import Braid
from server.app.reindex import reindex
from server.base.records import to_json_bytes
from server.features import revert, timetravel
from server.features.fork import fork_session
from server.git.session import GitSession
from server.git.workdir.index_format import PROCESS_STARTED, IndexLocked
from server.git.workdir.staging import DISK, is_sparse_file
from server.store.users import DEFAULT_USER

USER = DEFAULT_USER


def assert_off_disk(path: Path) -> None:
    """Nothing of history/ or runs/ on disk, their entries skip-worktree, status clean."""
    assert not (path / "history").exists() and not (path / "runs").exists()
    tags: dict[str, set[str]] = {}
    for line in git(path, "ls-files", "-t").splitlines():
        tag, rel = line.split(" ", 1)
        tags.setdefault(rel.split("/")[0], set()).add(tag)
    assert tags.get("history") == {"S"} and tags.get("runs") == {"S"}, tags
    assert tags.get("workdir", {"H"}) == {"H"} and tags.get("session.json") == {"H"}, tags
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "diff-files", "--name-only") == ""
    assert_fsck(path)


async def test_turns_keep_history_in_git_only(braid: Braid) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write a.txt one")
    done = await run_turn(braid, sid, "recall")
    assert done["messages"][-1]["content"] == "write a.txt one | recall"
    assert_off_disk(path)
    assert (path / "workdir" / "a.txt").read_text() == "one\n"
    assert not (path / ".git" / "braid-pending").exists() or \
        not any(p.is_file() for p in (path / ".git" / "braid-pending").rglob("*"))


async def test_continue_fork_and_revert_touch_only_the_workdir(braid: Braid) -> None:
    sid, path = await new_session(braid)
    first = await run_turn(braid, sid, "write a.txt one")
    for i in range(3):
        await run_turn(braid, sid, f"write b{i}.txt {i}")
    forked = await timetravel.continue_run_to_end(braid, USER, sid, first["run_id"],
                                                  input="recall")
    assert forked["forked"] and forked["messages"][-1]["content"] == "write a.txt one | recall"
    assert sorted(os.listdir(path / "workdir")) == ["a.txt"]
    assert_off_disk(path)

    copy = await fork_session(braid, USER, sid)
    copy_path = braid.store.path(copy["session_id"])
    assert_off_disk(copy_path)
    assert git(copy_path, "rev-parse", "HEAD:runs") == git(path, "rev-parse", "HEAD:runs")
    await run_turn(braid, copy["session_id"], "write c.txt in the fork")
    assert_off_disk(copy_path)

    wrote = await run_turn(braid, sid, "write d.txt on the sibling")
    await revert.revert_turn(braid, USER, sid, wrote["run_id"])
    assert not (path / "workdir" / "d.txt").exists()
    assert_off_disk(path)


def test_a_sub_agent_worktree_keeps_its_history_off_disk(tmp_path: Path) -> None:
    meta = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now",
            "forked_from_session_id": None, "root_session_id": "0" * 32}
    parent = GitSession.create(tmp_path / "s", meta)
    parent.create_branch("sub_x", parent.head_oid())
    folder = tmp_path / "s" / "_worktrees" / "sub_x"
    folder.parent.mkdir()
    parent.repo.add_worktree("sub_x", str(folder), parent.repo.references["refs/heads/sub_x"])
    child = GitSession(folder)
    child.pending.write("runs/000/00/r.json", b'{"status": "RUNNING"}\n')
    child.write_checkpoint({"history/000/00/000000-user-u.json": b"{}\n",
                            "runs/000/00/r.json": b'{"status": "DONE"}\n',
                            "workdir/a.txt": b"a\n"}, summary="t", kind="turn")
    assert not (folder / "history").exists() and not (folder / "runs").exists()
    assert child.pending.paths() == set()
    assert "S runs/000/00/r.json" in git(folder, "ls-files", "-t")
    assert git(folder, "status", "--porcelain") == ""
    assert git(tmp_path / "s", "status", "--porcelain") == ""


def old_style(path: Path) -> None:
    """Put history/ and runs/ back on disk with an index that has no skip-worktree bits, as
    Braid wrote sessions before."""
    git(path, "update-index", "--no-skip-worktree",
        *git(path, "ls-files", "history", "runs").split())
    git(path, "checkout", "--", "history", "runs")
    assert (path / "history").is_dir()
    assert git(path, "status", "--porcelain") == ""


async def test_a_session_with_history_on_disk_is_converted_when_opened(
        make_braid: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    braid = await make_braid(data)
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write a.txt one")
    await braid.stop()
    old_style(path)
    # A turn an old server was killed in: its user message and RUNNING record on disk only.
    run_id = "c" * 32
    msg = {"id": "d" * 32, "role": "user", "content": "typed before the kill",
           "run_id": run_id, "created_at": "now"}
    (path / "history/000/00/000004-user-" f"{'d' * 32}.json").write_bytes(to_json_bytes(msg))
    record = json.loads(git(path, "show", "HEAD:" + git(
        path, "ls-files", "runs").split()[0]))
    record.update(run_id=run_id, status="RUNNING", message_count=1)
    (path / f"runs/000/00/{run_id}.json").write_bytes(to_json_bytes(record))
    (data / "index.sqlite3").unlink()  # and the index lost: reindex finds the record

    braid = await make_braid(data)
    await reindex(braid)
    assert_off_disk(path)
    shown = json.loads(git(path, "show", f"HEAD:runs/000/00/{run_id}.json"))
    assert shown["status"] == "INTERRUPTED"
    contents = [json.loads(git(path, "show", f"HEAD:{f}"))["content"]
                for f in git(path, "ls-tree", "-r", "--name-only", "HEAD", "history").split()]
    assert "typed before the kill" in contents
    done = await run_turn(braid, sid, "recall")
    assert "typed before the kill" in done["messages"][-1]["content"]
    assert_off_disk(path)


async def test_a_user_edit_among_many_files_is_found_and_status_is_clean(
        braid: Braid) -> None:
    sid, path = await new_session(braid)
    for i in range(2000):
        folder = path / "workdir" / f"d{i // 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"{i}\n")
    await run_turn(braid, sid, "say first")
    assert_off_disk(path)
    await run_turn(braid, sid, "write d00/new.txt x")
    (path / "workdir" / "d07" / "f777.txt").write_text("edited by the user\n")
    await run_turn(braid, sid, "say after the edit")
    log = git(path, "log", "-3", "--format=%s", "--name-only")
    assert "User edits: d07/f777.txt" in log and "workdir/d07/f777.txt" in log
    assert_off_disk(path)
    repo = pygit2.Repository(str(path))
    assert repo.revparse_single("HEAD:workdir/d07/f777.txt").data == b"edited by the user\n"


async def test_checkouts_between_long_and_short_branches_move_only_index_entries(
        braid: Braid) -> None:
    """History in several folders: a continue from an early run and the way back to main
    leave the index exactly HEAD's tree (every entry, S for history), nothing on disk."""
    from server.features import sessions

    sid, path = await new_session(braid)
    first = await run_turn(braid, sid, "write a.txt one")
    for i in range(50):  # past 100 messages: history in two leaf folders
        await run_turn(braid, sid, f"say {i}")
    assert len(git(path, "ls-tree", "--name-only", "HEAD", "history/000/").split()) == 2
    forked = await timetravel.continue_run_to_end(braid, USER, sid, first["run_id"],
                                                  input="recall")
    for _ in range(2):
        listed = sorted(line.split("\t")[1] + " " + line.split()[1] for line in
                        git(path, "ls-files", "-s").splitlines())
        tree = sorted(line.split("\t")[1] + " " + line.split()[2] for line in
                      git(path, "ls-tree", "-r", "HEAD").splitlines())
        assert listed == tree
        assert_off_disk(path)
        await sessions.checkout(braid, USER, sid, "main")
    await sessions.checkout(braid, USER, sid, git(path, "for-each-ref", "--format=%(refname:short)",
                                                   "refs/heads/run/").split()[0])
    assert_off_disk(path)
    assert forked["messages"][-1]["content"] == "write a.txt one | recall"


async def test_the_index_file_holds_history_and_runs_as_one_entry_each(braid: Braid) -> None:
    """The index file names history/ and runs/ as one sparse directory entry each (HEAD's
    trees), so its writes cost the workdir's entries, not the chat's; git, libgit2 after a
    full scan, and a reopened session all read every file from it."""
    from server.git.workdir.index_format import SPARSE_DIR_MODE, entry_mode, entry_oid, parse

    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write a.txt one")
    size = (path / ".git" / "index").stat().st_size
    for i in range(55):  # past 100 messages: two leaf folders
        await run_turn(braid, sid, f"say {i}")
    keys, blobs = parse((path / ".git" / "index").read_bytes())
    assert keys == [b"history/", b"runs/", b"session.json", b"workdir/a.txt"]
    assert (path / ".git" / "index").stat().st_size == size  # flat as the chat grows
    for name in ("history", "runs"):
        blob = blobs[keys.index(f"{name}/".encode())]
        assert entry_mode(blob) == SPARSE_DIR_MODE
        assert entry_oid(blob).hex() == git(path, "rev-parse", f"HEAD:{name}").strip()
    assert_off_disk(path)  # git expands them: every file S, status clean, fsck
    files = sorted(git(path, "ls-tree", "-r", "--name-only", "HEAD", "history").split())
    assert len(files) > 100
    assert sorted(GitSession(path).index.load().paths("history/")) == files
    # A full scan (`git status`) and a bulk commit (blobs in a pack) with the writes after.
    handle = braid.store.get(sid)
    assert await handle.call(lambda g: g.scan.dirty_paths()) == []
    (path / "workdir" / "b.txt").write_text("by hand\n")
    await handle.call(lambda g: g.commit_workdir(["workdir/b.txt"], summary="User edits",
                                                     kind="user-edit"))
    assert git(path, "show", "HEAD:workdir/b.txt") == "by hand\n"
    await run_turn(braid, sid, "say after")
    assert parse((path / ".git" / "index").read_bytes())[0][:2] == [b"history/", b"runs/"]
    assert_off_disk(path)


def sparse_session(path: Path) -> Path:
    """A session whose index file a process before this one left sparse (history/ and
    runs/ as one directory entry each), its repository closed."""
    meta = {"session_id": "0" * 32, "title": "t", "user_id": "local", "created_at": "now",
            "forked_from_session_id": None, "root_session_id": "0" * 32}
    first = GitSession.create(path, meta)
    (path / "workdir" / "a.txt").write_text("a\n")
    first.write_checkpoint({"history/000/00/000000-user-u.json": b"{}\n",
                            "runs/000/00/r.json": b"{}\n", "workdir/a.txt": DISK},
                           summary="t", kind="turn", sync_index=False)
    first.index.flush()
    assert is_sparse_file(first.index.file)
    first.repo.free()
    return path


def test_a_sparse_index_file_left_by_a_process_before_opens_and_takes_files(
        tmp_path: Path) -> None:
    """libgit2 cannot read a sparse index (it reads the index for attributes when it makes
    a blob from a file): a session whose file is sparse is opened with a full file for it,
    and its later writes are sparse again."""
    path = sparse_session(tmp_path / "s")
    again = GitSession(path)  # the next process's repository
    assert not is_sparse_file(again.index.file)
    (path / "workdir" / "b.txt").write_text("b\n")
    again.write_checkpoint({"history/000/00/000001-assistant-v.json": b"{}\n",
                            "workdir/b.txt": DISK}, summary="t", kind="turn",
                           sync_index=False)
    again.index.flush()
    assert is_sparse_file(again.index.file)
    assert "S history/000/00/000001-assistant-v.json" in git(path, "ls-files", "-t")
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_a_sparse_index_killed_mid_rewrite_opens_after_a_restart(tmp_path: Path) -> None:
    """A server killed while it rewrote a sparse index file left `index.lock` beside it. The
    next server opens the session (which rewrites the file in full for libgit2) though
    recovery, which clears such locks, only runs through an open session."""
    path = sparse_session(tmp_path / "s")
    lock = path / ".git" / "index.lock"
    lock.write_bytes(b"half an index")  # the dead server's, from before this process
    os.utime(lock, (PROCESS_STARTED - 60, PROCESS_STARTED - 60))
    again = GitSession(path)
    assert not lock.exists() and not is_sparse_file(again.index.file)
    (path / "workdir" / "b.txt").write_text("b\n")
    again.write_checkpoint({"workdir/b.txt": DISK}, summary="t", kind="user-edit")
    assert git(path, "show", "HEAD:workdir/b.txt") == "b\n"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)
    # A lock taken since this process started is another writer's: it is left alone.
    again.write_checkpoint({"history/000/00/000001-user-v.json": b"{}\n"}, summary="t",
                           kind="turn", sync_index=False)
    again.index.flush()
    again.repo.free()
    assert is_sparse_file(again.index.file)
    lock.write_bytes(b"")
    try:
        GitSession(path)
        raise AssertionError("a live writer's lock was taken over")
    except IndexLocked:
        assert lock.exists()
    finally:
        lock.unlink()
