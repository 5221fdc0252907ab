"""A session's settings are the session's, not a branch's (DESIGN §4 "Approvals", issue 31):
after Edit & rerun or a rewind to an early message, a restart or an idle reload once put the
old checkpoint's `session.json` back (approvals `auto`, the old title and always list) and the
next write ran unasked. Also: the model's merge waits under `writes`, a second answer to one
call is `conflict`, and an Always is taken back with `update_session`. Real servers, real git
repositories read with the git CLI."""

from __future__ import annotations

import json
import time
from typing import Any

from conftest import Server, WsClient, git

SETTINGS = {"approvals": "writes", "title": "Kept title", "approvals_always": ["delete_file"]}


def ended(ws: WsClient, run_id: str) -> dict[str, Any]:
    frame = ws.until(lambda f: f.get("event") in ("run_completed", "run_error",
                                                   "run_cancelled")
                     and f["data"]["run_id"] == run_id, timeout=30)
    return dict(frame["data"])


def needed(ws: WsClient, tool: str) -> dict[str, Any]:
    frame = ws.until(lambda f: f.get("event") == "approval_needed"
                     and f["data"]["tool"] == tool, timeout=30)
    return dict(frame["data"])


def settled_on_an_old_branch(srv: Server, *, keep_files: bool = False) -> str:
    """A session with settings changed after its first turn, then that first message edited
    and rerun: the session now shows a branch made from before the change."""
    sid = srv.new_session()
    first = srv.run(sid, "say one")
    status, info = srv.api("PATCH", f"/api/sessions/{sid}", SETTINGS)
    assert status == 200 and info["approvals"] == "writes", info
    ws = srv.socket(sid)
    extra = {"keep_files": True} if keep_files else {}
    reply = ws.call("continue_run", run_id=first["run_id"], continue_from=0,
                    input="say two", **extra)
    assert reply["type"] == "result", reply
    assert ended(ws, reply["data"]["run_id"])["status"] == "COMPLETED"
    ws.close()
    path = srv.session_path(sid)
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").startswith("run/")
    # The branch shown holds the old copy: what used to come back.
    assert "approvals" not in json.loads(git(path, "show", "HEAD:session.json"))
    return sid


def assert_settings_hold(srv: Server, sid: str) -> None:
    status, info = srv.api("GET", f"/api/sessions/{sid}")
    assert status == 200, info
    assert {k: info[k] for k in SETTINGS} == SETTINGS
    ws = srv.socket(sid)
    run_id = ws.call("send_message", text="write leak.txt unasked")["data"]["run_id"]
    wait = needed(ws, "write_file")
    assert wait["run_id"] == run_id
    assert not (srv.session_path(sid) / "workdir" / "leak.txt").exists()
    ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"], decision="deny")
    assert ended(ws, run_id)["status"] == "COMPLETED"
    ws.close()


def test_settings_hold_after_edit_and_rerun_and_a_restart(server_factory: Any) -> None:
    srv = server_factory()
    sid = settled_on_an_old_branch(srv)
    srv.stop()
    srv.start()
    assert_settings_hold(srv, sid)
    _, listed = srv.api("GET", "/api/sessions")
    assert any(s["session_id"] == sid and s["title"] == "Kept title"
               for s in listed["sessions"]), listed


def test_settings_hold_after_a_rewind_and_an_idle_reload(server_factory: Any) -> None:
    srv = server_factory(BRAID_IDLE_SECONDS="1")
    sid = settled_on_an_old_branch(srv, keep_files=True)
    time.sleep(3)  # the session is released, and read again from disk when next opened
    assert_settings_hold(srv, sid)


def test_a_fork_keeps_the_settings(server_factory: Any) -> None:
    srv = server_factory()
    sid = settled_on_an_old_branch(srv)
    status, forked = srv.api("POST", f"/api/sessions/{sid}/fork")
    assert status in (200, 201), forked
    _, info = srv.api("GET", f"/api/sessions/{forked['session_id']}")
    assert info["approvals"] == "writes" and info["approvals_always"] == ["delete_file"]


def test_the_models_merge_waits_under_writes(server: Server) -> None:
    sid = server.new_session()
    status, _ = server.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    assert status == 200
    ws = server.socket(sid)
    path = server.session_path(sid)
    run_id = ws.call("send_message", text="spawn a: write merged.txt from a\\nsay a\nmerge ours")[
        "data"]["run_id"]
    child = needed(ws, "write_file")  # the child's own write asks first
    ws.call("approve_tool_call", run_id=child["run_id"], call_id=child["call_id"],
            decision="approve")
    wait = needed(ws, "merge_branches")
    assert wait["run_id"] == run_id
    # The child's file is on its branch, not in the parent's workdir, until the answer.
    assert not (path / "workdir" / "merged.txt").exists()
    ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"], decision="deny",
            reason="not yet")
    done = ended(ws, run_id)
    assert done["status"] == "COMPLETED"
    assert "merged.txt" not in git(path, "ls-tree", "-r", "--name-only", "HEAD")
    assert not (path / "workdir" / "merged.txt").exists()


def test_a_second_answer_is_a_conflict(server: Server) -> None:
    sid = server.new_session()
    server.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    ws = server.socket(sid)
    run_id = ws.call("send_message", text="slow 300\nwrite a.txt one\nsay ok")["data"][
        "run_id"]
    wait = needed(ws, "write_file")
    # Two answers sent at once: one is taken, the other is a conflict (never a silent 200).
    first = ws.send("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                    decision="approve")
    second = ws.send("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                     decision="deny")
    replies = [ws.reply(first), ws.reply(second)]
    assert replies[0]["type"] == "result", replies
    assert replies[1]["type"] == "error" and replies[1]["error"]["code"] == "conflict", replies
    assert ended(ws, run_id)["status"] == "COMPLETED"
    assert git(server.session_path(sid), "show", "HEAD:workdir/a.txt") == "one\n"
    # After the run, still a conflict (over HTTP: 409), not a fresh answer.
    status, body = server.api("POST", f"/api/runs/{run_id}/approve", {
        "session_id": sid, "call_id": wait["call_id"], "decision": "approve"})
    assert status == 409 and body["error"]["code"] == "conflict", body


def test_always_is_taken_back(server: Server) -> None:
    sid = server.new_session()
    server.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    ws = server.socket(sid)
    run_id = ws.call("send_message", text="write a.txt one")["data"]["run_id"]
    wait = needed(ws, "write_file")
    ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"], decision="always")
    assert ended(ws, run_id)["status"] == "COMPLETED"
    _, info = server.api("GET", f"/api/sessions/{sid}")
    assert info["approvals_always"] == ["write_file"]
    reply = ws.call("update_session", approvals_always=[])
    assert reply["type"] == "result" and reply["data"]["approvals_always"] == [], reply
    run_id = ws.call("send_message", text="write b.txt two")["data"]["run_id"]
    wait = needed(ws, "write_file")  # it asks again
    assert wait["run_id"] == run_id
    ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"], decision="deny")
    assert ended(ws, run_id)["status"] == "COMPLETED"
    for bad in ("write_file", [3], ["a b"], ["x"] * 201):
        reply = ws.call("update_session", approvals_always=bad)
        assert reply["type"] == "error" and reply["error"]["code"] == "bad_request", reply
    path = server.session_path(sid)
    assert "approvals_always" not in json.loads(git(path, "show", "HEAD:session.json"))
    assert git(path, "status", "--porcelain") == ""
