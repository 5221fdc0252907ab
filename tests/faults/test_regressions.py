"""Regression tests for the defects of issue 11 that leave a state on disk (D1, D6, D7): the
state a kill -9 left is made as it was found, then the server (core `Braid`) restarts.
D4 and D5 (kills mid-revert and mid-merge) are the crash matrix's revert/merge rows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pygit2

from conftest import assert_fsck, git, new_session, run_turn
from server.agent import turns
from server.base.ids import new_message_id, new_session_id, now_iso
from server.base.records import to_json_bytes
from server.features import timetravel
from server.git.history import history_path, run_path


async def test_d1_a_torn_temp_file_is_never_committed_by_recovery(make_braid: Any,
                                                                  tmp_path: Path) -> None:
    data = tmp_path / "data"
    braid = await make_braid(data)
    sid, path = await new_session(braid)
    first = await run_turn(braid, sid, "write a.txt one")
    # A turn killed inside a checkpoint: its user message and RUNNING record on disk, and
    # the 0-byte temporary file of the next message the checkpoint was writing.
    run_id = new_message_id()
    seq = len(first["messages"])
    user = {"id": new_message_id(), "role": "user", "content": "more", "run_id": run_id,
            "created_at": now_iso()}
    record = {"run_id": run_id, "session_id": sid, "status": "RUNNING", "branch": "main",
              "created_at": now_iso(), "updated_at": now_iso(), "message_count": 1}
    # Where a live turn keeps what it has not committed (history/ and runs/ are off disk).
    pending = path / ".git" / "braid-pending"
    (pending / history_path(seq, "user", user["id"])).parent.mkdir(parents=True, exist_ok=True)
    (pending / history_path(seq, "user", user["id"])).write_bytes(to_json_bytes(user))
    torn = pending / history_path(seq + 1, "assistant", run_id)
    (torn.parent / f".{torn.name}.tmp").write_bytes(b"")
    (torn.parent / ".~braid-0123.tmp").write_bytes(b"")
    record_file = pending / run_path(1, run_id)
    record_file.parent.mkdir(parents=True, exist_ok=True)
    record_file.write_bytes(to_json_bytes(record))
    await braid.index.upsert_run(sid, record)
    await braid.stop()

    again = await make_braid(data)
    tree = git(path, "ls-tree", "-r", "--name-only", "HEAD")
    assert ".tmp" not in tree
    assert json.loads(git(path, "show", f"HEAD:{run_path(1, run_id)}"))["status"] == \
        "INTERRUPTED"
    assert git(path, "status", "--porcelain", "--ignored") == ""
    assert not [p for p in pending.rglob("*") if p.is_file()]
    done = await run_turn(again, sid, "write b.txt two")
    assert done["status"] == "COMPLETED"
    cont = await timetravel.continue_run_to_end(again, "local", sid, run_id)
    assert cont["status"] == "COMPLETED", cont
    assert_fsck(path)


async def test_d6_git_status_is_clean_when_run_completed_arrives(braid: Any) -> None:
    sid, path = await new_session(braid)
    queue = braid.bus.subscribe(sid)
    text = "\n".join(f"write f{i:02d}.txt {i}" for i in range(60))
    run_id = await turns.send_message(braid, "local", sid, text)
    while True:
        frame = await asyncio.wait_for(queue.get(), 20)
        if frame["event"] == "run_completed" and frame["data"]["run_id"] == run_id:
            break
    # Read at once, on the event, as a client watching the socket would.
    assert git(path, "status", "--porcelain") == ""


async def test_d7_a_fork_killed_half_way_leaves_no_folder(make_braid: Any,
                                                          tmp_path: Path) -> None:
    data = tmp_path / "data"
    braid = await make_braid(data)
    sid, _ = await new_session(braid)
    await braid.stop()
    # What a fork killed after its `git init` left: a session folder holding only .git.
    half = data / "sessions" / new_session_id()
    pygit2.init_repository(str(half), bare=False, initial_head="main")
    again = await make_braid(data)
    assert not half.exists()
    assert [p.name for p in (data / "sessions").iterdir()] == [sid]
    assert again.store.all_ids() == [sid]
