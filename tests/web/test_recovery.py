"""A server killed with SIGKILL mid-run comes back with the run INTERRUPTED and clean repos, and
the SQLite index is a cache: deleted, `braid reindex` rebuilds the same sessions and runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Server, assert_fsck, git

SLOW = "slow 300\nsay one two three four five six seven eight nine ten"


def snapshot(server: Server) -> dict[str, Any]:
    """Everything the API says about the user's sessions and runs."""
    status, listed = server.api("GET", "/api/sessions")
    assert status == 200
    out: dict[str, Any] = {"sessions": listed["sessions"], "detail": {}, "runs": {}}
    for row in listed["sessions"]:
        sid = row["session_id"]
        status, info = server.api("GET", f"/api/sessions/{sid}")
        assert status == 200
        info.pop("running", None)
        out["detail"][sid] = info
        for run in info["runs"]:
            status, full = server.api("GET", f"/api/runs/{run['run_id']}?session_id={sid}")
            assert status == 200
            out["runs"][run["run_id"]] = full
    return out


def run_record(path: Path, run_id: str) -> dict[str, Any]:
    return json.loads(git(path, "show", f"HEAD:runs/000/00/{run_id}.json"))


@pytest.mark.slow
def test_sigkill_mid_run_then_restart_and_reindex(server_factory: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = server_factory(data_dir)
    busy_sid = first.new_session()
    fresh_sid = first.new_session()
    done = first.run(busy_sid, "write a.txt before")
    assert done["status"] == "COMPLETED"

    # Two runs in flight: one after a tool batch was committed, one a session's first turn.
    sockets = {sid: first.socket(sid) for sid in (busy_sid, fresh_sid)}
    texts = {busy_sid: f"write b.txt during\n{SLOW}", fresh_sid: SLOW}
    live = {sid: ws.call("send_message", text=texts[sid])["data"]["run_id"]
            for sid, ws in sockets.items()}
    for ws in sockets.values():
        ws.event("message_delta")
    first.stop(signal.SIGKILL)
    assert first.proc is not None and first.proc.returncode == -signal.SIGKILL

    second = server_factory(data_dir)
    for sid, run_id in live.items():
        status, info = second.api("GET", f"/api/sessions/{sid}")
        assert status == 200
        statuses = {r["run_id"]: r["status"] for r in info["runs"]}
        assert statuses[run_id] == "INTERRUPTED"
        path = second.session_path(sid)
        assert run_record(path, run_id)["status"] == "INTERRUPTED"
        assert git(path, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)").strip() \
            == "turn"
        assert git(path, "status", "--porcelain") == ""
        assert_fsck(path)
        status, run = second.api("GET", f"/api/runs/{run_id}?session_id={sid}")
        assert run["status"] == "INTERRUPTED"
        assert run["messages"][0]["role"] == "user"
        assert run["messages"][0]["content"] == texts[sid]
    assert statuses_of(second, busy_sid)[done["run_id"]] == "COMPLETED"
    busy_path = second.session_path(busy_sid)
    assert (busy_path / "workdir/b.txt").read_text() == "during\n"
    assert git(busy_path, "show", "HEAD:workdir/b.txt") == "during\n"
    # The title the interrupted first turn gave its session is kept.
    status, info = second.api("GET", f"/api/sessions/{fresh_sid}")
    assert info["title"] == "slow 300"
    assert json.loads(git(second.session_path(fresh_sid), "show", "HEAD:session.json"))[
        "title"] == "slow 300"
    # The sessions go on.
    assert second.run(fresh_sid, "say back")["status"] == "COMPLETED"

    before = snapshot(second)
    second.stop()
    (data_dir / "index.sqlite3").unlink()
    out = subprocess.run([sys.executable, "-m", "server.cli", "reindex", "--data-dir",
                          str(data_dir)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "reindexed 2 sessions, 4 runs"
    third = server_factory(data_dir)
    assert snapshot(third) == before
    third.stop()

    # A deleted index is also rebuilt at start-up, with nothing lost.
    for leftover in data_dir.glob("index.sqlite3*"):
        leftover.unlink()
    fourth = server_factory(data_dir)
    assert snapshot(fourth) == before


def statuses_of(server: Server, session_id: str) -> dict[str, str]:
    status, info = server.api("GET", f"/api/sessions/{session_id}")
    assert status == 200
    return {r["run_id"]: r["status"] for r in info["runs"]}


def test_sigkill_and_a_lost_index_still_recover_the_run(server_factory: Any,
                                                         tmp_path: Path) -> None:
    """Killed before its first checkpoint, a run exists only on disk; with the index gone too,
    start-up must still find it and commit it INTERRUPTED. Killed in the middle of a git write,
    the server leaves lock files that must not stop it from starting."""
    data_dir = tmp_path / "data"
    first = server_factory(data_dir)
    sid = first.new_session()
    ws = first.socket(sid)
    run_id = ws.call("send_message", text=SLOW)["data"]["run_id"]
    ws.event("message_delta")
    first.stop(signal.SIGKILL)
    for index_file in data_dir.glob("index.sqlite3*"):
        index_file.unlink()
    dot_git = first.session_path(sid) / ".git"
    (dot_git / "index.lock").write_bytes(b"DIRC partial")
    (dot_git / "refs/heads/main.lock").write_text("0" * 40 + "\n")

    second = server_factory(data_dir)
    assert statuses_of(second, sid) == {run_id: "INTERRUPTED"}
    path = second.session_path(sid)
    assert run_record(path, run_id)["status"] == "INTERRUPTED"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)
    assert not (dot_git / "index.lock").exists()
    assert second.run(sid, "say still works")["status"] == "COMPLETED"
