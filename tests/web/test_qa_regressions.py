"""Regressions found by QA, over the real HTTP API and socket against a real server: each test
failed before its fix."""

from __future__ import annotations

from typing import Any

from conftest import Server, assert_fsck, git


def test_a_missing_or_non_string_session_id_is_bad_request(shared_server: Server) -> None:
    # The turn endpoints take session_id from the query or the body. Leaving it out, or
    # sending a list or a number, is malformed input (400 bad_request), not an unknown
    # session (404): before the fix these answered 404 "no session None".
    sid = shared_server.new_session()
    turn = shared_server.run(sid, "write a.txt one")
    run_id = turn["run_id"]
    repo = shared_server.session_path(sid)
    head = git(repo, "rev-parse", "HEAD")
    calls: list[tuple[str, str, Any]] = [
        ("GET", f"/api/turns/{run_id}/files", None),
        ("GET", f"/api/turns/{run_id}/diff", None),
        ("POST", f"/api/turns/{run_id}/revert", {}),
        ("POST", f"/api/turns/{run_id}/unrevert", {}),
        ("POST", f"/api/turns/{run_id}/revert", {"session_id": [sid]}),
        ("POST", f"/api/turns/{run_id}/unrevert", {"session_id": 5}),
        ("POST", f"/api/runs/{run_id}/continue", {"session_id": {"id": sid}}),
    ]
    for method, path, body in calls:
        status, answer = shared_server.api(method, path, body)
        assert status == 400, (method, path, body, answer)
        assert answer["error"]["code"] == "bad_request", answer
        assert "session_id" in answer["error"]["message"], answer
    # A well-formed but unknown id is still not_found, and nothing changed.
    status, answer = shared_server.api("GET", f"/api/turns/{run_id}/files?session_id={'0' * 32}")
    assert status == 404 and answer["error"]["code"] == "not_found", answer
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""
    assert_fsck(repo)

