"""Reverting turns on real session repositories: a real `Braid` with the embedded demo model
driving the real tools, results checked on disk and with the git CLI."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, run_to_end
from server.agent import turns
from server.app.braid import Braid
from server.base.errors import BadRequest, Busy, Conflict, NotFound
from server.base.settings import Settings
from server.features import revert, sessions
from server.store import layout
from server.store.backups import REF_PREFIX, BackupStore, write_entry

USER = "local"
LINES = [f"line {i}" for i in range(1, 9)]


@pytest.fixture
async def braid(tmp_path: Path) -> AsyncIterator[Braid]:
    b = Braid(Settings(data_dir=tmp_path / "data", token="t" * 24))
    await b.start()
    yield b
    await b.stop()


@pytest.fixture
async def shell_braid(tmp_path: Path) -> AsyncIterator[Braid]:
    b = Braid(Settings(data_dir=tmp_path / "shell", token="t" * 24, shell_mode="sandbox"))
    await b.start()
    yield b
    await b.stop()


class Session:
    def __init__(self, braid: Braid, session_id: str) -> None:
        self.braid, self.id = braid, session_id
        self.path = braid.store.path(session_id)
        self.work = self.path / "workdir"

    async def turn(self, text: str) -> dict[str, Any]:
        run = await run_to_end(self.braid, USER, self.id, text)
        assert run["status"] == "COMPLETED", run
        return run

    def files(self) -> dict[str, str]:
        return {p.relative_to(self.work).as_posix(): p.read_text()
                for p in sorted(self.work.rglob("*")) if p.is_file()}

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD").strip()

    def kind(self, rev: str = "HEAD") -> str:
        body = git(self.path, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)", rev)
        return body.strip()

    def status(self) -> str:
        return git(self.path, "status", "--porcelain")


async def new_session(braid: Braid) -> Session:
    created = await sessions.create_session(braid, USER)
    return Session(braid, created["session_id"])


def numbered(lines: list[str]) -> str:
    return "\\n".join(lines)


# ------------------------------------------------------------------------- the basic cycle


async def test_revert_and_unrevert_give_back_each_turns_files(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn("write a.txt alpha\nwrite b.txt beta")
    after_turn1 = s.files()
    turn2 = await s.turn("write a.txt alpha two\ndelete b.txt\nwrite c.txt gamma")
    after_turn2 = s.files()
    tid = turn2["run_id"]

    listed = await revert.list_turn_files(braid, USER, s.id, tid)
    assert listed["paths"] == [{"path": "a.txt", "status": "modified"},
                               {"path": "b.txt", "status": "deleted"},
                               {"path": "c.txt", "status": "added"}]
    diff = (await revert.turn_diff(braid, USER, s.id, tid, "a.txt"))["diff"]
    assert "-alpha\n+alpha two\n" in diff and "b.txt" not in diff
    whole = (await revert.turn_diff(braid, USER, s.id, tid))["diff"]
    assert "+++ /dev/null" in whole and "--- /dev/null" in whole

    head_before = s.head()
    result = await revert.revert_turn(braid, USER, s.id, tid)
    assert s.files() == after_turn1  # c.txt gone, b.txt back, a.txt as turn 1 left it
    assert result["restored_paths"] == ["a.txt", "b.txt", "c.txt"]
    assert result["commit_id"] == s.head() and s.kind() == "revert"
    assert git(s.path, "rev-parse", "HEAD^").strip() == head_before
    assert s.status() == ""  # the commit and the index tell the truth
    record = json.loads(git(s.path, "show", f"HEAD:runs/000/00/{tid}.json"))
    assert record["reverted"] is True and record["status"] == "COMPLETED"

    again = await revert.unrevert_turn(braid, USER, s.id, tid)
    assert s.files() == after_turn2
    assert again["commit_id"] == s.head() and s.kind() == "unrevert"
    assert s.status() == ""
    assert_fsck(s.path)

    # And the cycle repeats: revert again after the redo.
    await revert.revert_turn(braid, USER, s.id, tid)
    assert s.files() == after_turn1
    assert_fsck(s.path)


def restore_all(g: Any, turn_id: str) -> list[str]:
    """Every path the turn backed up put back on disk as it was before the turn, blind, over
    what is there now (revert_turn restores three-way instead); the paths, sorted."""
    manifest = BackupStore(g).manifest(turn_id)
    for rel in sorted(manifest):
        write_entry(g, rel, manifest[rel])
    return sorted(manifest)


async def test_backups_live_outside_the_tracked_tree(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn("write a.txt one")
    turn = await s.turn("write a.txt two\nwrite new.txt x")
    tid = turn["run_id"]
    ref = f"{REF_PREFIX}{tid}"
    manifest = json.loads(git(s.path, "show", f"{ref}:manifest.json"))
    assert sorted(manifest["paths"]) == ["a.txt", "new.txt"]
    assert manifest["paths"]["new.txt"] is None  # absent before: restoring deletes it
    before_oid = manifest["paths"]["a.txt"]["oid"]
    assert git(s.path, "cat-file", "-p", before_oid) == "one\n"
    # Kept reachable by the ref, never in any branch's tree.
    assert before_oid in git(s.path, "ls-tree", "-r", ref)
    assert "manifest.json" not in git(s.path, "ls-tree", "-r", "--name-only", "HEAD")
    assert git(s.path, "branch", "--list").split() == ["*", "main"]
    handle = braid.store.get(s.id)
    assert await handle.call(lambda g: sorted(BackupStore(g).manifest(tid))) == \
        ["a.txt", "new.txt"]
    # Written back blind, the backups put both as they were.
    restored = await handle.call(lambda g: restore_all(g, tid))
    assert restored == ["a.txt", "new.txt"] and s.files() == {"a.txt": "one\n"}
    assert_fsck(s.path)


async def test_backup_store_keeps_modes_links_and_first_content(tmp_path: Path,
                                                                braid: Braid) -> None:
    s = await new_session(braid)
    handle = braid.store.get(s.id)
    (s.work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(s.work / "run.sh", 0o755)
    os.symlink("run.sh", s.work / "link")
    tid = "f" * 32

    def edit(g: Any) -> None:
        store = BackupStore(g)
        for name in ("run.sh", "link", "sub/new.txt", "run.sh"):
            store.backup_before_edit(tid, s.work / name)
        (s.work / "run.sh").write_text("changed\n")
        os.chmod(s.work / "run.sh", 0o644)
        (s.work / "link").unlink()
        (s.work / "link").write_text("not a link\n")
        (s.work / "sub").mkdir()
        (s.work / "sub" / "new.txt").write_text("new\n")
        with pytest.raises(ValueError):
            store.backup_before_edit(tid, tmp_path / "outside.txt")
        restore_all(g, tid)

    await handle.call(edit)
    assert (s.work / "run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert os.stat(s.work / "run.sh").st_mode & 0o100
    assert os.readlink(s.work / "link") == "run.sh"
    assert not (s.work / "sub").exists()  # created by the turn, emptied folder pruned too


# ------------------------------------------------------------------------------ three-way


async def test_three_way_keeps_later_work_and_refuses_overlaps(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn(f"write a.txt {numbered(LINES)}")
    changed = LINES.copy()
    changed[1] = "line 2 by turn 1"
    turn1 = await s.turn(f"write a.txt {numbered(changed)}")
    later = changed.copy()
    later[6] = "line 7 by turn 3"
    await s.turn(f"write a.txt {numbered(later)}")

    await revert.revert_turn(braid, USER, s.id, turn1["run_id"])
    expected = LINES.copy()
    expected[6] = "line 7 by turn 3"
    assert (s.work / "a.txt").read_text() == "\n".join(expected) + "\n"
    assert_fsck(s.path)


async def test_overlap_is_refused_then_forced_then_redone(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn(f"write a.txt {numbered(LINES)}\nwrite other.txt keep")
    changed = LINES.copy()
    changed[1] = "line 2 by turn 1"
    turn1 = await s.turn(f"write a.txt {numbered(changed)}\nwrite side.txt turn 1")
    later = changed.copy()
    later[1] = "line 2 by turn 3"
    await s.turn(f"write a.txt {numbered(later)}")
    before_files, before_head = s.files(), s.head()

    with pytest.raises(Conflict) as refused:
        await revert.revert_turn(braid, USER, s.id, turn1["run_id"])
    conflicts = refused.value.details["conflicts"]
    assert [c["path"] for c in conflicts] == ["a.txt"]
    assert "line 2 by turn 3" in conflicts[0]["ours"]
    assert "line 2\n" in conflicts[0]["theirs"] and "by turn" not in conflicts[0]["theirs"]
    assert s.files() == before_files and s.head() == before_head  # nothing changed

    forced = await revert.revert_turn(braid, USER, s.id, turn1["run_id"], force=True)
    assert [c["path"] for c in forced["conflicts"]] == ["a.txt"]
    assert (s.work / "a.txt").read_text() == "\n".join(LINES) + "\n"
    assert not (s.work / "side.txt").exists()
    await revert.unrevert_turn(braid, USER, s.id, turn1["run_id"])
    assert s.files() == before_files  # the state before the forced revert
    assert_fsck(s.path)


async def test_user_edits_survive_a_revert(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn(f"write a.txt {numbered(LINES)}")
    changed = LINES.copy()
    changed[1] = "line 2 by the turn"
    turn = await s.turn(f"write a.txt {numbered(changed)}\nwrite notes.txt turn")
    # The user edits another line of the same file and adds a file, and does not commit.
    mine = changed.copy()
    mine[6] = "line 7 by the user"
    (s.work / "a.txt").write_text("\n".join(mine) + "\n")
    (s.work / "mine.txt").write_text("my own file\n")

    await revert.revert_turn(braid, USER, s.id, turn["run_id"])
    expected = LINES.copy()
    expected[6] = "line 7 by the user"
    assert (s.work / "a.txt").read_text() == "\n".join(expected) + "\n"
    assert (s.work / "mine.txt").read_text() == "my own file\n"
    assert not (s.work / "notes.txt").exists()
    kinds = git(s.path, "log", "-2", "--format=%(trailers:key=Braid-Kind,valueonly)").split()
    assert kinds == ["revert", "user-edit"]  # the user's edit is its own commit
    assert s.status() == ""


async def test_user_edit_between_turns_is_what_a_revert_goes_back_to(braid: Braid) -> None:
    s = await new_session(braid)
    await s.turn("write a.txt from the agent")
    (s.work / "a.txt").write_text("from the user\n")
    turn2 = await s.turn("write a.txt agent again")
    await revert.revert_turn(braid, USER, s.id, turn2["run_id"])
    assert (s.work / "a.txt").read_text() == "from the user\n"


# ------------------------------------------------------------------ what the model is told


async def test_the_next_model_call_is_told_of_the_revert(braid: Braid) -> None:
    s = await new_session(braid)
    turn = await s.turn("write a.txt x\nwrite b.txt y")
    await revert.revert_turn(braid, USER, s.id, turn["run_id"])
    answer = (await s.turn("notes"))["messages"][-1]["content"]
    assert f"Turn {turn['run_id']} was reverted" in answer
    assert "a.txt, b.txt" in answer
    await revert.unrevert_turn(braid, USER, s.id, turn["run_id"])
    answer = (await s.turn("notes"))["messages"][-1]["content"]
    assert f"The revert of turn {turn['run_id']} was undone" in answer
    # The notes belong to no run: the turn's own messages are unchanged.
    run = await sessions.get_run(braid, USER, s.id, turn["run_id"])
    assert [m["role"] for m in run["messages"]] == [m["role"] for m in turn["messages"]]
    view = await sessions.transcript(braid, USER, s.id)
    notes = [i["message"]["content"] for i in view["turns"] if i["type"] == "note"]
    assert len(notes) == 2
    first = next(i for i in view["turns"] if i.get("run_id") == turn["run_id"])
    assert first["files"] == [{"path": "a.txt", "status": "added"},
                              {"path": "b.txt", "status": "added"}]
    assert first["run"]["reverted"] is False


async def test_shell_changes_are_listed_and_reverted(shell_braid: Braid) -> None:
    s = await new_session(shell_braid)
    await s.turn("write keep.txt kept")
    turn = await s.turn("shell mkdir -p out && echo made > out/s.txt && chmod +x keep.txt")
    listed = await revert.list_turn_files(shell_braid, USER, s.id, turn["run_id"])
    assert listed["paths"] == [{"path": "keep.txt", "status": "modified"},
                               {"path": "out/s.txt", "status": "added"}]
    handle = shell_braid.store.get(s.id)
    backed = await handle.call(lambda g: sorted(BackupStore(g).manifest(turn["run_id"])))
    assert backed == ["keep.txt", "out/s.txt"]
    await revert.revert_turn(shell_braid, USER, s.id, turn["run_id"])
    assert not (s.work / "out").exists()
    assert not os.stat(s.work / "keep.txt").st_mode & 0o100
    assert s.status() == ""
    assert_fsck(s.path)


# ---------------------------------------------------------------------------- bad requests


async def test_errors_are_clear_and_change_nothing(braid: Braid) -> None:
    s = await new_session(braid)
    other = await new_session(braid)
    turn = await s.turn("write a.txt x")
    chat = await s.turn("just talk")
    other_turn = await other.turn("write o.txt o")
    tid = turn["run_id"]
    head = s.head()
    for bad in ("0" * 32, "not-an-id", other_turn["run_id"]):
        for name in ("revert_turn", "unrevert_turn", "list_turn_files"):
            with pytest.raises(NotFound):
                await call_action(braid, USER, s.id, name, turn_id=bad)
    with pytest.raises(BadRequest):
        await call_action(braid, USER, s.id, "revert_turn", turn_id=42)
    with pytest.raises(BadRequest):
        await call_action(braid, USER, s.id, "revert_turn", turn_id=tid, force="maybe")
    with pytest.raises(BadRequest):
        await call_action(braid, USER, s.id, "turn_diff", turn_id=tid, path=["a.txt"])
    with pytest.raises(NotFound):
        await revert.turn_diff(braid, USER, s.id, tid, "nope.txt")
    with pytest.raises(NotFound):  # another user's session is not revealed
        await revert.revert_turn(braid, "mallory", s.id, tid)
    with pytest.raises(Conflict):
        await revert.unrevert_turn(braid, USER, s.id, tid)
    with pytest.raises(Conflict):  # a turn that changed no file
        await revert.revert_turn(braid, USER, s.id, chat["run_id"])
    assert s.head() == head
    await revert.revert_turn(braid, USER, s.id, tid)
    head = s.head()
    with pytest.raises(Conflict) as twice:
        await revert.revert_turn(braid, USER, s.id, tid)
    assert "already reverted" in twice.value.message
    assert s.head() == head and s.files() == {}
    assert_fsck(s.path)


async def test_alias_assistant_message_id_and_busy(braid: Braid) -> None:
    s = await new_session(braid)
    turn = await s.turn("write a.txt one\nbatch\nwrite b.txt two")
    later_answer = [m for m in turn["messages"] if m["role"] == "assistant"][-1]["id"]
    assert later_answer != turn["run_id"]
    listed = await revert.list_turn_files(braid, USER, s.id, later_answer)
    assert listed["turn_id"] == turn["run_id"] and len(listed["paths"]) == 2

    run_id = await turns.send_message(braid, USER, s.id, "slow 150\nsay slowly now")
    with pytest.raises(Busy):
        await revert.revert_turn(braid, USER, s.id, later_answer)
    active = braid.runs.find(s.id, run_id)
    assert active is not None
    await active.done.wait()
    result = await revert.revert_turn(braid, USER, s.id, later_answer)
    assert result["turn_id"] == turn["run_id"] and s.files() == {}


async def test_reindex_reads_the_revert_state_from_git(braid: Braid) -> None:
    s = await new_session(braid)
    turn = await s.turn("write a.txt x")
    await revert.revert_turn(braid, USER, s.id, turn["run_id"])
    handle = braid.store.get(s.id)
    records = await handle.call(lambda g: list(layout.runs(g)))
    assert [r["reverted"] for r in records] == [True]
    # Two sessions at once: each revert runs on its own session's thread.
    a, b = await new_session(braid), await new_session(braid)
    ta, tb = await a.turn("write x.txt a"), await b.turn("write y.txt b")
    await asyncio.gather(revert.revert_turn(braid, USER, a.id, ta["run_id"]),
                         revert.revert_turn(braid, USER, b.id, tb["run_id"]))
    assert a.files() == {} and b.files() == {}

