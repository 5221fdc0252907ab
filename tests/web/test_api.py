"""The HTTP JSON API (DESIGN §5) against a real server: response shapes, status codes and error
bodies, and that what it reports matches the session repository."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from conftest import Server, git

RUN_KEYS = {"run_id", "status", "branch", "forked_from_run_id", "forked_from_message_index",
            "regenerated_from", "created_at"}


def raw(server: Server, method: str, path: str, data: bytes | None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"{server.base_url}{path}", data=data, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def assert_error(status: int, body: Any, expected_status: int, code: str) -> None:
    assert status == expected_status, body
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code and body["error"]["message"], body


def test_create_list_and_describe(shared_server: Server) -> None:
    status, created = shared_server.api("POST", "/api/sessions", {"title": "  My work  "})
    assert status == 201
    session_id = created["session_id"]
    assert created["title"] == "My work"
    later = shared_server.new_session()  # an empty body is fine too

    status, listed = shared_server.api("GET", "/api/sessions")
    assert status == 200
    ids = [s["session_id"] for s in listed["sessions"]]
    assert ids.index(later) < ids.index(session_id)  # newest first
    row = next(s for s in listed["sessions"] if s["session_id"] == session_id)
    assert row["title"] == "My work" and row["user_id"] == "local"

    status, info = shared_server.api("GET", f"/api/sessions/{session_id}")
    assert status == 200
    path = shared_server.session_path(session_id)
    assert info["session_id"] == session_id and info["title"] == "My work"
    assert info["user_id"] == "local"
    assert info["branch"] == "main"
    assert info["head"] == git(path, "rev-parse", "HEAD").strip()
    assert info["branches"] == [{"name": "main", "head": info["head"]}]
    assert info["runs"] == []


def test_post_run_returns_the_finished_run(shared_server: Server) -> None:
    session_id = shared_server.new_session()
    status, run = shared_server.api("POST", f"/api/sessions/{session_id}/runs",
                                    {"input": "write notes/a.txt hello"})
    assert status == 200, run
    assert run["status"] == "COMPLETED" and run["error"] is None
    assert run["session_id"] == session_id and run["branch"] == "main"
    assert [m["role"] for m in run["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert run["messages"][0]["content"] == "write notes/a.txt hello"
    assert run["messages"][-1]["content"] == "done: wrote notes/a.txt"
    assert all(m["run_id"] == run["run_id"] for m in run["messages"])
    path = shared_server.session_path(session_id)
    assert (path / "workdir/notes/a.txt").read_text() == "hello\n"

    status, fetched = shared_server.api(
        "GET", f"/api/runs/{run['run_id']}?session_id={session_id}")
    assert status == 200
    assert fetched == run

    status, info = shared_server.api("GET", f"/api/sessions/{session_id}")
    assert info["head"] == git(path, "rev-parse", "HEAD").strip()
    assert info["title"] == "write notes/a.txt hello"
    assert len(info["runs"]) == 1 and RUN_KEYS <= set(info["runs"][0])
    assert info["runs"][0]["run_id"] == run["run_id"]
    assert info["runs"][0]["status"] == "COMPLETED"
    assert info["runs"][0]["branch"] == "main"


@pytest.mark.slow
def test_a_model_error_is_a_finished_run_with_its_error(shared_server: Server) -> None:
    session_id = shared_server.new_session()
    status, run = shared_server.api("POST", f"/api/sessions/{session_id}/runs",
                                    {"input": "fail boom"})
    assert status == 200
    assert run["status"] == "ERROR" and "boom" in run["error"]


def test_bad_input_is_400(shared_server: Server) -> None:
    session_id = shared_server.new_session()
    auth = {"Authorization": f"Bearer {shared_server.token}",
            "Content-Type": "application/json"}
    for path in ("/api/sessions", f"/api/sessions/{session_id}/runs"):
        for data in (b"{bad json", b"[1, 2]", b'"text"'):
            assert_error(*raw(shared_server, "POST", path, data, auth), 400, "bad_request")
    for body in ({}, {"input": ""}, {"input": 5}, {"input": None}):
        status, err = shared_server.api("POST", f"/api/sessions/{session_id}/runs", body)
        assert_error(status, err, 400, "bad_request")
    status, err = shared_server.api("POST", "/api/sessions", {"title": 5})
    assert_error(status, err, 400, "bad_request")
    status, err = shared_server.api("GET", "/api/sessions?q=")
    assert status == 200
    # The run id of GET /api/runs/{id} is only meaningful with its session.
    status, err = shared_server.api("GET", f"/api/runs/{'a' * 32}")
    assert_error(status, err, 400, "bad_request")
    # Nothing was written by the refused requests.
    path = shared_server.session_path(session_id)
    assert git(path, "rev-list", "--count", "HEAD").strip() == "1"


def test_no_or_bad_token_is_401(shared_server: Server) -> None:
    session_id = shared_server.new_session()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"},
                    {"Cookie": "braid_token=wrong"}):
        for method, path, data in (("GET", "/api/sessions", None),
                                   ("POST", "/api/sessions", b"{}"),
                                   ("GET", f"/api/sessions/{session_id}", None),
                                   ("POST", f"/api/sessions/{session_id}/runs",
                                    b'{"input": "hi"}')):
            assert_error(*raw(shared_server, method, path, data, headers), 401, "unauthorized")
    # The browser's login cookie is accepted by the API too.
    status, _ = raw(shared_server, "GET", "/api/sessions", None,
                    {"Cookie": f"braid_token={shared_server.token}"})
    assert status == 200


def test_unknown_and_foreign_ids_are_404(shared_server: Server, other_token: str) -> None:
    session_id = shared_server.new_session()
    run = shared_server.run(session_id, "say hi")
    other_session = shared_server.new_session()
    unknown = "0" * 32
    for path in (f"/api/sessions/{unknown}", "/api/sessions/not-an-id",
                 f"/api/runs/{unknown}?session_id={session_id}",
                 f"/api/runs/not-a-run?session_id={session_id}",
                 f"/api/runs/{run['run_id']}?session_id={unknown}",
                 f"/api/runs/{run['run_id']}?session_id={other_session}"):
        assert_error(*shared_server.api("GET", path), 404, "not_found")
    status, err = shared_server.api("POST", f"/api/sessions/{unknown}/runs", {"input": "hi"})
    assert_error(status, err, 404, "not_found")

    # Another user sees none of it, exactly as if it did not exist.
    for method, path, body in (
            ("GET", f"/api/sessions/{session_id}", None),
            ("GET", f"/api/runs/{run['run_id']}?session_id={session_id}", None),
            ("POST", f"/api/sessions/{session_id}/runs", {"input": "hi"})):
        status, err = shared_server.api(method, path, body, token=other_token)
        assert_error(status, err, 404, "not_found")
    status, listed = shared_server.api("GET", "/api/sessions", token=other_token)
    assert status == 200
    assert session_id not in [s["session_id"] for s in listed["sessions"]]
    path = shared_server.session_path(session_id)
    assert git(path, "rev-list", "--count", "HEAD").strip() == "2"


def test_a_busy_branch_is_409(shared_server: Server) -> None:
    session_id = shared_server.new_session()
    ws = shared_server.socket(session_id)
    try:
        ws.call("send_message", text="slow 100\nsay a b c d e f")
        status, err = shared_server.api("POST", f"/api/sessions/{session_id}/runs",
                                        {"input": "say second"})
        assert_error(status, err, 409, "busy")
        ws.event("run_completed")
    finally:
        ws.close()
    assert shared_server.run(session_id, "say second")["status"] == "COMPLETED"
