"""The message queue on a team server (two `braid serve` processes, one data dir, one
PostgreSQL): a queue filled through process A runs on process B, in order, each message
once; with A killed, B alone still runs what A queued.

Timeouts are generous (this machine runs several suites at once)."""

from __future__ import annotations

import signal
from typing import Any

from conftest import Server, assert_fsck, git

RUN = "slow 100\nsay " + " ".join(f"w{i}" for i in range(30))  # ~3 s
LONG = "slow 200\nsay " + " ".join(f"w{i}" for i in range(300))  # ~60 s: killed before its end





def turn_subjects(srv: Server, sid: str) -> list[str]:
    return git(srv.session_path(sid), "log", "--reverse", "--format=%s").splitlines()


def test_a_queue_filled_on_a_runs_on_b(team_pair: Any) -> None:
    a, b = team_pair
    sid = a.new_session()
    ws_b, ws_a = b.socket(sid), a.socket(sid)
    try:
        first = ws_b.call("send_message", text=RUN)["data"]["run_id"]  # the run goes on B
        queued = [ws_a.call("send_message", text=f"say m{i}", queue=True) for i in range(3)]
        assert all(set(q.get("data") or {}) == {"queued_id"} for q in queued), queued
        ids = [q["data"]["queued_id"] for q in queued]
        # B's sockets hear of A's queue (the team's bus).
        ws_b.until(lambda f: f.get("event") == "queue_changed" and len(f["data"]["ids"]) == 3)
        assert [q["queued_id"] for q in ws_b.call("list_queue")["data"]["queued"]] == ids
        # A is gone: only B can start them, when its run ends.
        ws_a.close()
        a.stop(signal.SIGKILL)
        ws_b.until(lambda f: f.get("event") == "run_completed"
                   and f["data"]["run_id"] == ids[-1], timeout=90)
        runs = b.settled_runs(sid, 4)
        assert [(r["run_id"], r["status"]) for r in runs] == [
            (first, "COMPLETED"), *((i, "COMPLETED") for i in ids)]
        starts = [f["data"]["run_id"] for f in ws_b.frames if f.get("event") == "run_started"]
        assert starts == [first, *ids]  # each started once, in order
        assert turn_subjects(b, sid)[-3:] == ["Turn: say m0", "Turn: say m1", "Turn: say m2"]
        assert ws_b.call("list_queue")["data"] == {"queued": []}
    finally:
        ws_b.close()
    assert_fsck(b.session_path(sid))


def test_what_a_dead_process_queued_behind_its_dead_run_runs_on_the_other(team_pair: Any) -> None:
    a, b = team_pair
    sid = a.new_session()
    ws_a = a.socket(sid)
    first = ws_a.call("send_message", text=LONG)["data"]["run_id"]  # the run goes on A
    ids = [ws_a.call("send_message", text=f"say m{i}", queue=True)["data"]["queued_id"]
           for i in range(2)]
    ws_a.close()
    a.stop(signal.SIGKILL)
    # B finds A's run dead (INTERRUPTED: it holds nothing), then starts the queue in order.
    runs = b.settled_runs(sid, 3)
    assert [(r["run_id"], r["status"]) for r in runs] == [
        (first, "INTERRUPTED"), (ids[0], "COMPLETED"), (ids[1], "COMPLETED")]
    assert turn_subjects(b, sid)[-2:] == ["Turn: say m0", "Turn: say m1"]
    assert b.api("GET", f"/api/sessions/{sid}/queue") == (200, {"queued": []})
    assert_fsck(b.session_path(sid))
