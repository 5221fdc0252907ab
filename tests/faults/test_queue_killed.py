"""kill -9 and the message queue: what was queued survives in the index database and runs
after the restart, in order, each message exactly once.

- killed with a run going and two messages queued: recovery commits the run INTERRUPTED,
  which does not hold the branch, so both messages run after it, in order;
- killed at each point of starting a queued message (`crash.POINTS["queue"]`): claimed but
  its turn not opened → it waits again and runs; launched (its run indexed) but its row not
  yet deleted → it is not started twice (its run is the INTERRUPTED one, resumable)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, free_port, git
from server.base.crash import POINTS

SLOW = "slow 150\nsay " + " ".join(f"w{i}" for i in range(200))  # ~30 s: killed before its end
SHORT = "slow 50\nsay " + " ".join(f"w{i}" for i in range(10))



def user_messages(srv: Server, sid: str, runs: list[dict[str, Any]]) -> list[str]:
    out = []
    for run in runs:
        status, body = srv.api("GET", f"/api/runs/{run['run_id']}?session_id={sid}")
        assert status == 200, body
        out += [m["content"] for m in body["messages"] if m["role"] == "user"]
    return out


def queue_two(srv: Server, sid: str, first: str) -> tuple[str, str, str]:
    ws = srv.socket(sid)
    try:
        run_id = ws.call("send_message", text=first)["data"]["run_id"]
        one = ws.call("send_message", text="say one", queue=True)["data"]["queued_id"]
        two = ws.call("send_message", text="say two", queue=True)["data"]["queued_id"]
    finally:
        ws.close()
    return run_id, one, two


def test_killed_with_a_run_going_and_two_queued(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data_dir=data, port=free_port()).start()
    sid = srv.new_session()
    first, one, two = queue_two(srv, sid, SLOW)
    srv.stop(signal.SIGKILL)
    again = Server(data_dir=data, port=free_port()).start()
    try:
        runs = again.settled_runs(sid, 3)
        # The INTERRUPTED run does not hold the queue back: both run after it, in order.
        assert [(r["run_id"], r["status"]) for r in runs] == [
            (first, "INTERRUPTED"), (one, "COMPLETED"), (two, "COMPLETED")]
        assert user_messages(again, sid, runs) == [SLOW, "say one", "say two"]
        assert again.api("GET", f"/api/sessions/{sid}/queue") == (200, {"queued": []})
        repo = again.session_path(sid)
        assert git(repo, "log", "--reverse", "--format=%s").splitlines()[-2:] == [
            "Turn: say one", "Turn: say two"]
        assert_fsck(repo)
    finally:
        again.stop()


@pytest.mark.parametrize("point", POINTS["queue"])
def test_killed_while_starting_a_queued_message(tmp_path: Path, point: str) -> None:
    data = tmp_path / "data"
    srv = Server(data_dir=data, port=free_port(), env={"BRAID_CRASH_AT": point}).start()
    sid = srv.new_session()
    first, one, two = queue_two(srv, sid, SHORT)
    assert srv.proc is not None  # the first run ends, "say one" starts, the point is hit
    assert srv.proc.wait(timeout=60) == -signal.SIGKILL, f"{point} was never reached"
    again = Server(data_dir=data, port=free_port()).start()
    try:
        runs = again.settled_runs(sid, 3)
        statuses = [(r["run_id"], r["status"]) for r in runs]
        if point == "queue.after_claim":  # not started: it waited again, and ran
            assert statuses == [(first, "COMPLETED"), (one, "COMPLETED"), (two, "COMPLETED")]
        else:  # started, then killed: INTERRUPTED like any run, and never started again
            assert statuses == [(first, "COMPLETED"), (one, "INTERRUPTED"),
                                (two, "COMPLETED")]
        assert user_messages(again, sid, runs) == [SHORT, "say one", "say two"]
        assert again.api("GET", f"/api/sessions/{sid}/queue") == (200, {"queued": []})
        assert_fsck(again.session_path(sid))
    finally:
        again.stop()
