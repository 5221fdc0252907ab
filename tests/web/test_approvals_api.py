"""Approvals (DESIGN §4 "Approvals", §5 `approve_tool_call`, `update_session {approvals}`):
a session's mode makes the shell, or every tool that changes files, wait for the user; the
answer comes over the socket or its HTTP twin. Checked against a real server, its files and
its git history with the git CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import ROOT, Server, WsClient, free_port, git


@pytest.fixture(scope="module")
def shell_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the shell tool on, for the module's tests (each its own session)."""
    srv = Server(data_dir=tmp_path_factory.mktemp("approvals") / "data", port=free_port(),
                 env={"BRAID_SHELL": "on"})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def stranger(shell_server: Server) -> str:
    """A second user's token, made with the CLI as an admin would."""
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "user", "add", "stranger", "--data-dir",
         str(shell_server.data_dir)], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def with_mode(server: Server, mode: str) -> str:
    sid = server.new_session()
    status, info = server.api("PATCH", f"/api/sessions/{sid}", {"approvals": mode})
    assert status == 200 and info["approvals"] == mode, info
    return sid


def needed(ws: WsClient, tool: str | None = None) -> dict[str, Any]:
    frame = ws.until(lambda f: f.get("event") == "approval_needed"
                     and (tool is None or f["data"]["tool"] == tool), timeout=30)
    return dict(frame["data"])


def ended(ws: WsClient, run_id: str) -> dict[str, Any]:
    frame = ws.until(lambda f: f.get("event") in ("run_completed", "run_error",
                                                   "run_cancelled")
                     and f["data"]["run_id"] == run_id, timeout=30)
    return dict(frame["data"])


def tool_results(run: dict[str, Any]) -> list[str]:
    return [m["content"] for m in run["messages"] if m["role"] == "tool"]


def test_mode_is_kept_in_session_json_shown_and_checked(shell_server: Server) -> None:
    sid = shell_server.new_session()
    _, info = shell_server.api("GET", f"/api/sessions/{sid}")
    assert info["approvals"] == "auto"
    sid = with_mode(shell_server, "writes")
    path = shell_server.session_path(sid)
    assert json.loads(git(path, "show", "HEAD:session.json"))["approvals"] == "writes"
    _, info = shell_server.api("GET", f"/api/sessions/{sid}")
    assert info["approvals"] == "writes"
    ws = shell_server.socket(sid)
    reply = ws.call("update_session", approvals="shell")
    assert reply["type"] == "result" and reply["data"]["approvals"] == "shell", reply
    assert json.loads(git(path, "show", "HEAD:session.json"))["approvals"] == "shell"
    for bad in ("sometimes", 3, None, ["shell"], "AUTO"):
        reply = ws.call("update_session", approvals=bad)
        assert reply["type"] == "error" and reply["error"]["code"] == "bad_request", reply
        status, body = shell_server.api("PATCH", f"/api/sessions/{sid}", {"approvals": bad})
        assert status == 400 and body["error"]["code"] == "bad_request", body
    reply = ws.call("update_session", approvals="auto")
    assert "approvals" not in json.loads(git(path, "show", "HEAD:session.json"))
    assert git(path, "status", "--porcelain") == ""


def test_approve_over_the_socket_runs_the_write_only_then(shell_server: Server) -> None:
    sid = with_mode(shell_server, "writes")
    ws = shell_server.socket(sid)
    path = shell_server.session_path(sid)
    run_id = ws.call("send_message", text="write a.txt hello")["data"]["run_id"]
    wait = needed(ws)
    assert wait["run_id"] == run_id and wait["tool"] == "write_file"
    assert wait["args"] == {"path": "a.txt", "content": "hello\n"}
    assert "+hello" in wait["diff"]
    # Nothing written before the answer: not in the workdir, not in git.
    assert not (path / "workdir" / "a.txt").exists()
    assert "a.txt" not in git(path, "ls-tree", "-r", "--name-only", "HEAD")
    # The page of a second tab shows the waiting call.
    status, html = shell_server.page(f"/s/{sid}")
    assert status == 200 and 'class="approval-card"' in html and "approve_tool_call" in html
    reply = ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                    decision="approve")
    assert reply["data"] == {"run_id": run_id, "call_id": wait["call_id"],
                             "decision": "approve"}
    resolved = ws.event("approval_resolved")
    assert resolved["data"]["decision"] == "approve"
    assert ended(ws, run_id)["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/a.txt") == "hello\n"
    # Answered once: a second answer is a conflict.
    again = ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                    decision="approve")
    assert again["error"]["code"] == "conflict"


def test_deny_with_a_reason_is_the_models_tool_result(shell_server: Server) -> None:
    sid = with_mode(shell_server, "writes")
    ws = shell_server.socket(sid)
    run_id = ws.call("send_message", text="write a.txt no\nsay fine")["data"]["run_id"]
    wait = needed(ws)
    reply = ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"],
                    decision="deny", reason="not that file")
    assert reply["data"]["decision"] == "deny"
    done = ended(ws, run_id)
    assert done["status"] == "COMPLETED"
    assert tool_results(done) == ["denied by the user: not that file"]
    assert not (shell_server.session_path(sid) / "workdir" / "a.txt").exists()


def test_always_lets_the_tool_run_unasked_for_the_session(shell_server: Server) -> None:
    sid = with_mode(shell_server, "shell")
    ws = shell_server.socket(sid)
    path = shell_server.session_path(sid)
    # A write does not wait in `shell` mode; the shell does.
    run_id = ws.call("send_message", text="write w.txt free\nbatch\nshell echo one > s.txt")[
        "data"]["run_id"]
    wait = needed(ws)
    assert wait["tool"] == "shell" and wait["args"] == {"command": "echo one > s.txt"}
    assert (path / "workdir" / "w.txt").exists() and not (path / "workdir" / "s.txt").exists()
    ws.call("approve_tool_call", run_id=run_id, call_id=wait["call_id"], decision="always")
    assert ended(ws, run_id)["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/s.txt") == "one\n"
    meta = json.loads(git(path, "show", "HEAD:session.json"))
    assert meta["approvals_always"] == ["shell"] and meta["approvals"] == "shell"
    _, info = shell_server.api("GET", f"/api/sessions/{sid}")
    assert info["approvals_always"] == ["shell"]
    # The next shell call does not wait.
    mark = len(ws.frames)
    second = ws.call("send_message", text="shell echo two > t.txt")["data"]["run_id"]
    assert ended(ws, second)["status"] == "COMPLETED"
    assert not any(f.get("event") == "approval_needed" for f in ws.frames[mark:])
    assert git(path, "show", "HEAD:workdir/t.txt") == "two\n"


def test_http_twin_approves_denies_and_refuses_clearly(shell_server: Server,
                                                      stranger: str) -> None:
    sid = with_mode(shell_server, "writes")
    ws = shell_server.socket(sid)
    path = shell_server.session_path(sid)
    # HTTP's run waits for its end: started on a thread, answered over HTTP.
    finished: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: finished.update(
        shell_server.run(sid, "write a.txt one\nbatch\nwrite b.txt two")))
    runner.start()
    first = needed(ws)
    run_id = first["run_id"]
    url = f"/api/runs/{run_id}/approve"
    bad = [({"session_id": sid, "call_id": first["call_id"], "decision": "maybe"}, 400),
           ({"session_id": sid, "call_id": first["call_id"]}, 400),
           ({"session_id": sid, "call_id": 5, "decision": "approve"}, 400),
           ({"session_id": sid, "call_id": "nope", "decision": "approve"}, 404),
           ({"session_id": sid, "call_id": first["call_id"], "decision": "deny",
             "reason": 7}, 400)]
    for body, code in bad:
        status, answer = shell_server.api("POST", url, body)
        assert status == code, (body, answer)
    status, answer = shell_server.api("POST", f"/api/runs/{'0' * 32}/approve",
                                      {"session_id": sid, "call_id": first["call_id"],
                                       "decision": "approve"})
    assert status == 404, answer
    # Another user's session: not_found, and the call still waits.
    status, answer = shell_server.api("POST", url, {
        "session_id": sid, "call_id": first["call_id"], "decision": "approve"},
        token=stranger)
    assert status == 404 and answer["error"]["code"] == "not_found", answer
    other = shell_server.socket(sid, token=stranger)
    assert other.next()["error"]["code"] == "not_found"
    # The socket twin of the bad answers.
    for params, code in [({"decision": "maybe"}, "bad_request"),
                         ({"call_id": "nope"}, "not_found")]:
        reply = ws.call("approve_tool_call", **{"run_id": run_id,
                                                "call_id": first["call_id"],
                                                "decision": "approve", **params})
        assert reply["error"]["code"] == code, reply
    assert not (path / "workdir" / "a.txt").exists()
    status, answer = shell_server.api("POST", url, {
        "session_id": sid, "call_id": first["call_id"], "decision": "approve"})
    assert status == 200 and answer == {"run_id": run_id, "call_id": first["call_id"],
                                        "decision": "approve"}
    second = needed(ws)
    assert second["args"]["path"] == "b.txt"
    status, answer = shell_server.api("POST", url, {
        "session_id": sid, "call_id": second["call_id"], "decision": "deny",
        "reason": "keep b"})
    assert status == 200, answer
    runner.join(timeout=30)
    assert finished["status"] == "COMPLETED"
    assert tool_results(finished)[-1] == "denied by the user: keep b"
    assert git(path, "show", "HEAD:workdir/a.txt") == "one\n"
    assert not (path / "workdir" / "b.txt").exists()


def test_stop_while_waiting_ends_the_run_cancelled(shell_server: Server) -> None:
    sid = with_mode(shell_server, "writes")
    ws = shell_server.socket(sid)
    run_id = ws.call("send_message", text="write a.txt never")["data"]["run_id"]
    needed(ws)
    reply = ws.call("cancel_run", run_id=run_id)
    assert reply["data"] == {"run_id": run_id, "status": "CANCELLED"}
    path = shell_server.session_path(sid)
    assert not (path / "workdir" / "a.txt").exists()
    assert git(path, "status", "--porcelain") == ""


def test_a_sub_agents_waiting_call_shows_on_the_parents_page(shell_server: Server) -> None:
    sid = shell_server.new_session()
    parent = shell_server.run(sid, "say parent")["run_id"]
    status, _ = shell_server.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    assert status == 200
    ws = shell_server.socket(sid)
    spawned: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: spawned.update(shell_server.api(
        "POST", f"/api/sessions/{sid}/sub_agents",
        {"parent_turn_id": parent, "prompt": "write kid.txt hi", "label": "kid"})[1]))
    runner.start()
    wait = needed(ws)
    assert wait["branch"].startswith("sub_") and wait["label"] == "kid"
    assert wait["shown_in"] == parent and wait["run_id"] != parent
    # The parent's page shows it in the parent turn's bubble, with Approve / Deny / Always.
    status, html = shell_server.page(f"/s/{sid}")
    assert status == 200
    turn = html[html.index(f'id="turn-{parent}"'):]
    assert f'data-call-id="{wait["call_id"]}"' in turn.split("</section>")[0]
    reply = ws.call("approve_tool_call", run_id=wait["run_id"], call_id=wait["call_id"],
                    decision="approve")
    assert reply["type"] == "result", reply
    runner.join(timeout=30)
    branch = spawned["branch"]
    assert git(shell_server.session_path(sid), "show", f"{branch}:workdir/kid.txt") == "hi\n"
