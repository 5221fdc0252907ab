"""Per-file revert and rewinding on either axis (DESIGN §4 "Revert a turn", "Rewind, on
either axis") on real session repositories: a real `Braid`, the demo model driving the real
tools, results checked on disk and with the git CLI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conftest import assert_fsck, git
from server.app.braid import Braid
from server.base.errors import BadRequest, Conflict, NotFound
from server.base.settings import Settings
from server.features import revert, sessions, timetravel
from tests.features.test_revert import USER, Session, new_session


@pytest.fixture
async def braid(tmp_path: Path) -> AsyncIterator[Braid]:
    b = Braid(Settings(data_dir=tmp_path / "data", token="t" * 24))
    await b.start()
    yield b
    await b.stop()


def record_at(s: Session, run_id: str, rev: str = "HEAD") -> dict[str, object]:
    names = git(s.path, "ls-tree", "-r", "--name-only", rev, "runs/").split()
    name = next(n for n in names if n.endswith(f"{run_id}.json"))
    loaded: dict[str, object] = json.loads(git(s.path, "show", f"{rev}:{name}"))
    return loaded


async def three_files(s: Session) -> tuple[str, dict[str, str], dict[str, str]]:
    await s.turn("write a.txt one\nwrite b.txt two")
    before = s.files()
    turn = await s.turn("write a.txt one more\ndelete b.txt\nwrite c.txt three")
    return turn["run_id"], before, s.files()


# ------------------------------------------------------------------------ per-file revert


async def test_per_file_revert_then_the_rest_then_redo_per_file(braid: Braid) -> None:
    s = await new_session(braid)
    tid, before, after = await three_files(s)

    one = await revert.revert_turn(braid, USER, s.id, tid, paths=["c.txt"])
    assert one["restored_paths"] == ["c.txt"] and s.kind() == "revert"
    assert not (s.work / "c.txt").exists()
    assert (s.work / "a.txt").read_text() == "one more\n"  # the turn's other files stand
    record = record_at(s, tid)
    assert record["reverted"] is False and record["reverted_files"] == ["c.txt"]
    listed = await revert.list_turn_files(braid, USER, s.id, tid)
    assert listed["reverted_files"] == ["c.txt"] and listed["reverted"] is False
    # Only c.txt changed in that commit (git's own view of it).
    assert git(s.path, "diff", "--name-only", "HEAD^", "HEAD", "--", "workdir").split() \
        == ["workdir/c.txt"]

    with pytest.raises(Conflict, match="already reverted"):
        await revert.revert_turn(braid, USER, s.id, tid, paths=["c.txt"])
    with pytest.raises(BadRequest, match="did not change"):
        await revert.revert_turn(braid, USER, s.id, tid, paths=["nope.txt"])
    with pytest.raises(Conflict, match="not reverted"):
        await revert.unrevert_turn(braid, USER, s.id, tid, paths=["a.txt"])

    # A whole-turn revert after a partial one reverts the rest.
    rest = await revert.revert_turn(braid, USER, s.id, tid)
    assert rest["restored_paths"] == ["a.txt", "b.txt"]
    assert s.files() == before
    record = record_at(s, tid)
    assert record["reverted"] is True and record["reverted_files"] == ["a.txt", "b.txt", "c.txt"]
    with pytest.raises(Conflict, match="already reverted"):
        await revert.revert_turn(braid, USER, s.id, tid)

    # Redo one file: its change comes back, the others stay reverted.
    redo = await revert.unrevert_turn(braid, USER, s.id, tid, paths=["b.txt"])
    assert redo["restored_paths"] == ["b.txt"] and s.kind() == "unrevert"
    assert not (s.work / "b.txt").exists() and (s.work / "a.txt").read_text() == "one\n"
    assert record_at(s, tid)["reverted_files"] == ["a.txt", "c.txt"]
    # Redo of the rest (whole turn).
    await revert.unrevert_turn(braid, USER, s.id, tid)
    assert s.files() == after
    assert record_at(s, tid)["reverted_files"] == []
    assert s.status() == ""
    assert_fsck(s.path)


async def test_per_file_revert_is_three_way_and_forced_per_file(braid: Braid) -> None:
    s = await new_session(braid)
    turn = await s.turn("write a.txt 1\\n2\\n3\\n4\\n5\\n6\\n7\nwrite b.txt b")
    tid = turn["run_id"]
    await s.turn("write a.txt 1\\n2\\n3\\n4\\n5\\n6\\nseven")
    # a.txt was created by the turn and edited since: taking it out conflicts.
    with pytest.raises(Conflict) as refused:
        await revert.revert_turn(braid, USER, s.id, tid, paths=["a.txt"])
    details = refused.value.details or {}
    assert [c["path"] for c in details.get("conflicts") or []] == ["a.txt"]
    assert details.get("paths") == ["a.txt"]
    assert (s.work / "b.txt").exists()
    forced = await revert.revert_turn(braid, USER, s.id, tid, force=True, paths=["a.txt"])
    assert forced["restored_paths"] == ["a.txt"] and not (s.work / "a.txt").exists()
    assert (s.work / "b.txt").read_text() == "b\n"  # not named: untouched
    # Its redo gives back the later work the force replaced.
    await revert.unrevert_turn(braid, USER, s.id, tid, paths=["a.txt"])
    assert (s.work / "a.txt").read_text().endswith("seven\n")
    assert_fsck(s.path)


async def test_the_next_model_call_names_the_reverted_files(braid: Braid) -> None:
    s = await new_session(braid)
    tid, _, _ = await three_files(s)
    await revert.revert_turn(braid, USER, s.id, tid, paths=["a.txt"])
    answer = (await s.turn("notes"))["messages"][-1]["content"]
    assert f"Turn {tid}'s changes to a.txt were reverted" in answer
    assert "b.txt, c.txt still stand" in answer


# ------------------------------------------------------------- the conversation only


async def test_continue_keep_files_starts_from_the_current_files(braid: Braid) -> None:
    s = await new_session(braid)
    first = await s.turn("write a.txt one")
    await s.turn("write b.txt two")
    (s.work / "u.txt").write_text("unsaved\n")  # the user's edit: part of "current files"
    current = s.files()
    started = await timetravel.continue_run(braid, USER, s.id, first["run_id"],
                                            continue_from=0, input="write c.txt three",
                                            keep_files=True)
    active = braid.runs.find(s.id, started["run_id"])
    if active is not None:
        await active.done.wait()
    branch = f"run/{started['run_id']}"
    assert git(s.path, "symbolic-ref", "--short", "HEAD").strip() == branch
    # The files are the source branch's current ones (its head, the user's edit committed),
    # not the checkpoint's (before the first run: no file at all), plus the new turn's.
    assert s.files() == {**current, "c.txt": "three\n"}
    fork = git(s.path, "log", "--format=%H %(trailers:key=Braid-Kind,valueonly)", branch)
    kinds = [line.split()[1] for line in fork.splitlines() if len(line.split()) > 1]
    assert "fork" in kinds
    fork_commit = next(line.split()[0] for line in fork.splitlines() if line.endswith("fork"))
    assert git(s.path, "rev-parse", f"{fork_commit}:workdir").strip() == \
        git(s.path, "rev-parse", "main:workdir").strip()
    assert record_at(s, started["run_id"], branch)["keep_files"] is True
    # The conversation was rewound: the new run holds no message of the second turn.
    run = await sessions.get_run(braid, USER, s.id, started["run_id"])
    assert [m["content"] for m in run["messages"] if m["role"] == "user"] == \
        ["write c.txt three"]
    assert s.status() == ""
    assert_fsck(s.path)


# ------------------------------------------------------------------ the files only


async def test_rewind_files_keeps_the_conversation_and_is_undone(braid: Braid) -> None:
    s = await new_session(braid)
    first = await s.turn("write a.txt one")
    at_first = s.files()
    await s.turn("write a.txt changed\nwrite b.txt two")
    after = s.files()
    total = len(await sessions_messages(braid, s))
    rewound = await timetravel.rewind_files(braid, USER, s.id, first["run_id"],
                                            len(first["messages"]))
    assert s.files() == at_first
    assert rewound["restored_paths"] == ["a.txt", "b.txt"] and s.kind() == "revert"
    assert rewound["commit_id"] == s.head()
    # No message dropped: one system note more.
    messages = await sessions_messages(braid, s)
    assert len(messages) == total + 1 and messages[-1]["id"] == rewound["turn_id"]
    assert messages[-1]["kind"] == "rewind"
    # Rewinding to before the first message: no file at all.
    answer = (await s.turn("notes"))["messages"][-1]["content"]
    assert "The files were rewound" in answer
    undone = await revert.unrevert_turn(braid, USER, s.id, rewound["turn_id"])
    assert undone["restored_paths"] == ["a.txt", "b.txt"] and s.kind() == "unrevert"
    assert s.files() == after
    with pytest.raises(Conflict, match="undone already"):
        await revert.unrevert_turn(braid, USER, s.id, rewound["turn_id"])
    with pytest.raises(BadRequest, match="outside"):
        await timetravel.rewind_files(braid, USER, s.id, first["run_id"], 99)
    with pytest.raises(NotFound):
        await timetravel.rewind_files(braid, USER, s.id, "0" * 32, 0)
    await timetravel.rewind_files(braid, USER, s.id, first["run_id"], 0)
    assert s.files() == {}
    assert s.status() == ""
    assert_fsck(s.path)


async def sessions_messages(braid: Braid, s: Session) -> list[dict[str, object]]:
    view = await sessions.transcript(braid, USER, s.id)
    out: list[dict[str, object]] = []
    for item in view["turns"]:
        if item["type"] == "note":
            out.append(dict(item["message"]))
        else:
            out += [dict(m) for m in ([item["user"]] if item.get("user") else [])
                    + list(item["parts"])]
    return out


async def test_the_note_of_a_per_file_redo_names_only_the_files_it_brought_back(
        braid: Braid) -> None:
    s = await new_session(braid)
    tid, _, after = await three_files(s)
    await revert.revert_turn(braid, USER, s.id, tid, paths=["c.txt"])
    await revert.unrevert_turn(braid, USER, s.id, tid, paths=["c.txt"])
    assert s.files() == after
    notes = [str(m.get("content")) for m in await sessions_messages(braid, s)
             if m.get("role") == "system" or m.get("kind")]
    last = notes[-1]
    assert "c.txt are back" in last, notes
    assert "a.txt" not in last and "b.txt" not in last, last  # they were never reverted


async def test_the_undo_of_a_rewind_is_summed_up_by_the_run_it_rewound_to(
        braid: Braid) -> None:
    s = await new_session(braid)
    first = await s.turn("write a.txt one")
    await s.turn("write a.txt two")
    rewound = await timetravel.rewind_files(braid, USER, s.id, first["run_id"], 1)
    await revert.unrevert_turn(braid, USER, s.id, rewound["turn_id"])
    subject = git(s.path, "log", "-1", "--format=%s").strip()
    # Not the rewind's own id (it names no turn, so the page could not make it readable).
    assert subject == f"Undo the files rewind to run {first['run_id'][:10]}: a.txt", subject
    assert rewound["turn_id"][:10] not in subject
