"""The history layout (DESIGN §3): folders of at most 100 entries, and sessions written in the
earlier layout (`history/NNN/`, `runs/NNN/`, built here by hand with the git CLI) still open,
show, revert and continue."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from conftest import assert_fsck, git, run_turn
from server.app.reindex import reindex
from server.features import revert, sessions, timetravel

USER = "local"
SID = "0123456789abcdef0123456789abcdef"
RUN = "aa" * 16
USER_MSG = "bb" * 16


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def commit(folder: Path, message: str) -> None:
    subprocess.run(["git", "-C", str(folder), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=Braid",
                    "-c", "user.email=braid@localhost", "commit", "-q", "-m", message],
                   check=True)


def old_session(sessions_dir: Path) -> Path:
    """A session as the earlier layout wrote it: one turn that wrote `a.txt`."""
    folder = sessions_dir / SID
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True)
    (folder / ".git" / "info").mkdir(exist_ok=True)
    (folder / ".git" / "info" / "exclude").write_text("/_worktrees/\n")
    write_json(folder / "session.json", {
        "session_id": SID, "title": "old", "user_id": USER, "created_at": "2026-01-01T00:00:00Z",
        "forked_from_session_id": None, "root_session_id": SID})
    commit(folder, "Create session old\n\nBraid-Kind: user-edit")
    now = "2026-01-01T00:00:01Z"
    write_json(folder / f"history/000/000000-user-{USER_MSG}.json", {
        "id": USER_MSG, "role": "user", "content": "write a.txt old", "run_id": RUN,
        "created_at": now})
    write_json(folder / f"history/000/000001-assistant-{RUN}.json", {
        "id": RUN, "role": "assistant", "content": "wrote a.txt", "run_id": RUN,
        "created_at": now})
    write_json(folder / f"runs/000/{RUN}.json", {
        "run_id": RUN, "session_id": SID, "status": "COMPLETED", "branch": "main",
        "created_at": now, "updated_at": now, "message_count": 2, "usage": {}, "model": "demo",
        "forked_from_run_id": None, "forked_from_message_index": None,
        "regenerated_from": None, "error": None, "parent_run_id": None})
    (folder / "workdir").mkdir()
    (folder / "workdir" / "a.txt").write_text("old\n")
    commit(folder, f"Turn: write a.txt old\n\nBraid-Kind: turn\nBraid-Run: {RUN}\n"
                   "Braid-Message-Index: 2")
    return folder


async def test_an_old_layout_session_opens_shows_reverts_and_continues(make_braid: Any,
                                                                      tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = old_session(data / "sessions")
    braid = await make_braid(data)
    await reindex(braid)

    listed = await sessions.list_sessions(braid, USER)
    assert [s["session_id"] for s in listed] == [SID]
    view = await sessions.transcript(braid, USER, SID)
    turn = next(t for t in view["turns"] if t["type"] == "turn")
    assert turn["user"]["content"] == "write a.txt old"
    assert turn["files"] == [{"path": "a.txt", "status": "added"}]
    run = await sessions.get_run(braid, USER, SID, RUN)
    assert [m["content"] for m in run["messages"]] == ["write a.txt old", "wrote a.txt"]

    reverted = await revert.revert_turn(braid, USER, SID, RUN)
    assert reverted["restored_paths"] == ["a.txt"]
    assert not (folder / "workdir" / "a.txt").exists()

    # A new turn goes on in the session's own layout, after the old messages.
    await run_turn(braid, SID, "write b.txt new")
    done = await run_turn(braid, SID, "recall")
    assert done["status"] == "COMPLETED"
    assert done["messages"][-1]["content"] == "write a.txt old | write b.txt new | recall"
    names = git(folder, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    assert all(n.count("/") == 2 for n in names), names
    assert [int(n.split("/")[2].split("-")[0]) for n in names] == list(range(len(names)))
    assert git(folder, "ls-tree", "--name-only", "HEAD", "runs/000/").split() \
        == sorted([f"runs/000/{RUN}.json", *(f"runs/000/{r['run_id']}.json" for r in
                                              await braid.index.list_runs(SID)
                                              if r["run_id"] != RUN)])

    # Time travel from the old run: a sibling run from its checkpoint, files included.
    points = await timetravel.list_checkpoints(braid, USER, SID, RUN)
    assert [p["message_index"] for p in points["checkpoints"]] == [0, 1, 2]
    forked = await timetravel.continue_run_to_end(braid, USER, SID, RUN, input="recall")
    assert forked["forked"] is True and forked["status"] == "COMPLETED"
    assert forked["messages"][-1]["content"] == "write a.txt old | recall"
    assert (folder / "workdir" / "a.txt").read_text() == "old\n"
    assert git(folder, "status", "--porcelain") == ""
    assert_fsck(folder)


async def test_a_run_record_lands_in_folders_of_a_hundred(braid: Any) -> None:
    created = await sessions.create_session(braid, USER)
    sid = created["session_id"]
    folder = braid.store.path(sid)
    for i in range(3):
        await run_turn(braid, sid, f"say {i}")
    records = git(folder, "ls-tree", "-r", "--name-only", "HEAD", "runs/").split()
    assert len(records) == 3 and all(r.startswith("runs/000/00/") for r in records)
    names = git(folder, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    assert all(n.startswith("history/000/00/") for n in names) and len(names) == 6
