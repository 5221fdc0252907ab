"""Approvals on a team server (two `braid serve` processes on one data dir and one
PostgreSQL): a call waiting in a turn process B drives is shown by process A, and A's answer
(approve, deny with a reason, always) reaches the turn on B."""

from __future__ import annotations

import json
from typing import Any

from conftest import WsClient, git


def waiting(ws: WsClient) -> dict[str, Any]:
    return dict(ws.event("approval_needed", timeout=60)["data"])


def end_of(ws: WsClient, run_id: str) -> dict[str, Any]:
    return dict(ws.until(lambda f: f.get("event") in ("run_completed", "run_error",
                                                       "run_cancelled")
                         and f["data"]["run_id"] == run_id, timeout=60)["data"])


def test_an_answer_on_a_reaches_the_turn_on_b(team_pair: Any) -> None:
    a, b = team_pair
    sid = a.new_session()
    status, _ = a.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    assert status == 200
    ws_a, ws_b = a.socket(sid), b.socket(sid)
    path = a.session_path(sid)
    # B drives the turn (B read the mode A set: session.json, reloaded on B's side).
    run_id = ws_b.call("send_message", text="write a.txt one\nbatch\nwrite b.txt two")[
        "data"]["run_id"]
    first = waiting(ws_a)
    assert first["run_id"] == run_id and first["args"]["path"] == "a.txt"
    # A's page draws the call waiting on B.
    status, html = a.page(f"/s/{sid}")
    assert status == 200 and f'data-call-id="{first["call_id"]}"' in html
    assert not (path / "workdir" / "a.txt").exists()
    # Approved on A: B writes it.
    reply = ws_a.call("approve_tool_call", run_id=run_id, call_id=first["call_id"],
                      decision="approve")
    assert reply["data"] == {"run_id": run_id, "call_id": first["call_id"],
                             "decision": "approve"}
    second = waiting(ws_a)
    assert second["args"]["path"] == "b.txt"
    assert (path / "workdir" / "a.txt").read_text() == "one\n"
    # Denied on A over HTTP, with a reason: the model on B reads it.
    status, body = a.api("POST", f"/api/runs/{run_id}/approve", {
        "session_id": sid, "call_id": second["call_id"], "decision": "deny",
        "reason": "not b"})
    assert status == 200, body
    done = end_of(ws_b, run_id)
    assert done["status"] == "COMPLETED"
    results = [m["content"] for m in done["messages"] if m["role"] == "tool"]
    assert results[-1] == "denied by the user: not b"
    assert git(path, "show", "HEAD:workdir/a.txt") == "one\n"
    assert not (path / "workdir" / "b.txt").exists()
    # A second answer to a call A answered is a conflict; on B, which never saw an answer
    # of its own to it, the call is no longer waiting.
    reply = ws_a.call("approve_tool_call", run_id=run_id, call_id=first["call_id"],
                      decision="approve")
    assert reply["error"]["code"] == "conflict"
    reply = ws_b.call("approve_tool_call", run_id=run_id, call_id=first["call_id"],
                      decision="approve")
    assert reply["error"]["code"] == "not_found"


def test_always_on_a_lets_bs_next_call_run_unasked(team_pair: Any) -> None:
    a, b = team_pair
    sid = a.new_session()
    status, _ = a.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    assert status == 200
    ws_a, ws_b = a.socket(sid), b.socket(sid)
    path = a.session_path(sid)
    run_id = ws_b.call("send_message", text="write a.txt one\nbatch\nwrite c.txt three")[
        "data"]["run_id"]
    first = waiting(ws_a)
    ws_a.call("approve_tool_call", run_id=run_id, call_id=first["call_id"], decision="always")
    assert end_of(ws_b, run_id)["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/c.txt") == "three\n"
    assert not any(f.get("event") == "approval_needed" and f["data"]["args"]["path"] == "c.txt"
                   for f in ws_a.frames)
    assert json.loads(git(path, "show", "HEAD:session.json"))["approvals_always"] == [
        "write_file"]
    _, info = a.api("GET", f"/api/sessions/{sid}")
    assert info["approvals_always"] == ["write_file"]
    assert git(path, "status", "--porcelain") == ""
