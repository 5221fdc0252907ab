"""Explicit lanes (issue 8): a long shell command runs on its session's shell lane, so the
session's page, its DAG and `list_turn_files` still answer while it runs.

No tight wall-clock bound (the machine may be loaded): the command touches a file when it
starts and another when it ends 20 s later, and every answer must come back while the second
file does not exist yet. The measured times are printed."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from conftest import Server

SLOW = "shell touch started.txt && sleep 20 && touch ended.txt"


def _get(srv: Server, path: str) -> tuple[int, str]:
    req = urllib.request.Request(f"{srv.base_url}{path}")
    req.add_header("Authorization", f"Bearer {srv.token}")
    with urllib.request.urlopen(req, timeout=60) as res:
        return res.status, res.read().decode()


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    out = fn()
    return (time.monotonic() - t0) * 1000, out


def test_a_long_shell_command_leaves_the_session_answering(server_factory: Any) -> None:
    srv = server_factory(BRAID_SHELL="on")
    sid = srv.new_session()
    first = srv.run(sid, "write a.txt hello")
    workdir = srv.session_path(sid) / "workdir"
    ws = srv.socket(sid)
    try:
        sent = ws.call("send_message", text=SLOW)
        assert sent["type"] == "result", sent
        run_id = sent["data"]["run_id"]
        ws.event("tool_call")
        deadline = time.monotonic() + 15
        while not (workdir / "started.txt").exists():  # the command is running now
            assert time.monotonic() < deadline, "the shell command never started"
            time.sleep(0.05)

        times: dict[str, float] = {}
        times["page"], (status, html) = _timed(lambda: _get(srv, f"/s/{sid}"))
        assert status == 200 and f'data-run-id="{run_id}"' in html
        times["page again"], (status, html) = _timed(lambda: _get(srv, f"/s/{sid}"))
        assert status == 200
        times["dag"], (status, html) = _timed(lambda: _get(srv, f"/s/{sid}/dag"))
        assert status == 200 and 'id="dag"' in html
        times["list_turn_files (socket)"], files = _timed(
            lambda: ws.call("list_turn_files", turn_id=first["run_id"]))
        assert files["type"] == "result", files
        assert files["data"]["paths"] == [{"path": "a.txt", "status": "added"}]
        times["list_turn_files (HTTP)"], (status, body) = _timed(lambda: srv.api(
            "GET", f"/api/turns/{first['run_id']}/files?session_id={sid}"))
        assert status == 200 and body["paths"] == files["data"]["paths"]
        print("\nanswers while `sleep 20` runs (ms): " +
              ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
        # Every answer came back while the command was still running.
        assert not (workdir / "ended.txt").exists(), times

        stopped = ws.call("cancel_run", run_id=run_id)
        assert stopped["type"] == "result" and stopped["data"]["status"] == "CANCELLED"
    finally:
        ws.close()
    # The stopped command's result is in the run, and the turn's history is whole.
    status, run = srv.api("GET", f"/api/runs/{run_id}?session_id={sid}")
    assert status == 200 and run["status"] == "CANCELLED"
    tools = [m for m in run["messages"] if m["role"] == "tool"]
    assert len(tools) == 1 and tools[0]["name"] == "shell"
    assert not (workdir / "ended.txt").exists()
