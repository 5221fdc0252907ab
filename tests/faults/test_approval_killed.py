"""kill -9 while a tool call waits for approval (DESIGN §4 "Approvals"): after the restart the
run is INTERRUPTED and nothing of the call was written; resumed, it asks again, and once
approved the file is written."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from conftest import Server, assert_fsck, free_port, git


def test_kill_9_while_waiting_interrupts_and_the_resume_asks_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data_dir=data, port=free_port()).start()
    try:
        sid = srv.new_session()
        status, _ = srv.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
        assert status == 200
        ws = srv.socket(sid)
        run_id = ws.call("send_message", text="write a.txt approved\nsay ok")["data"]["run_id"]
        wait = ws.event("approval_needed", timeout=30)["data"]
        assert wait["tool"] == "write_file"
        srv.stop(signal.SIGKILL)
        assert srv.proc is not None and srv.proc.returncode == -signal.SIGKILL
    finally:
        srv.stop()
    path = srv.session_path(sid)
    assert not (path / "workdir" / "a.txt").exists()

    again = Server(data_dir=data, port=free_port()).start()
    try:
        status, info = again.api("GET", f"/api/sessions/{sid}")
        assert status == 200
        assert {r["run_id"]: r["status"] for r in info["runs"]}[run_id] == "INTERRUPTED"
        assert not (path / "workdir" / "a.txt").exists()
        assert "a.txt" not in git(path, "ls-tree", "-r", "--name-only", "HEAD")
        assert git(path, "status", "--porcelain") == ""
        record = json.loads(git(path, "show", f"HEAD:runs/000/00/{run_id}.json"))
        assert record["status"] == "INTERRUPTED"
        # The mode survived the restart; the resumed run asks again.
        assert info["approvals"] == "writes"
        ws = again.socket(sid)
        reply = ws.call("continue_run", run_id=run_id)
        assert reply["type"] == "result" and reply["data"]["run_id"] == run_id, reply
        wait = ws.event("approval_needed", timeout=30)["data"]
        assert wait["run_id"] == run_id and wait["args"]["path"] == "a.txt"
        assert not (path / "workdir" / "a.txt").exists()
        ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                decision="approve")
        end = ws.until(lambda f: f.get("event") == "run_completed", timeout=30)
        assert end["data"]["run_id"] == run_id
        assert git(path, "show", "HEAD:workdir/a.txt") == "approved\n"
        assert git(path, "status", "--porcelain") == ""
        assert_fsck(path)
    finally:
        again.stop()
