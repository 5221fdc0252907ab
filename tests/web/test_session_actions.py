"""Rename, archive/restore, model and delete of a session, over HTTP and the socket, against a
real server; checked in session.json on every branch (with the git CLI) and in the index."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from typing import Any

import pytest

from conftest import Server, git

BAD_UPDATES: list[dict[str, Any]] = [
    {"title": ""}, {"title": "   "}, {"title": 5}, {"title": None}, {"title": ["x"]},
    {"title": "a\x00b"}, {"title": "two\nlines"}, {"title": "x" * 121},
    {"title": "bad \ud800 surrogate"},
    {"archived": "true"}, {"archived": 1}, {"archived": None},
    {"model": 7}, {"model": "m\x00"}, {"model": {"id": "x"}},
]


def session_json(server: Server, session_id: str, rev: str = "HEAD") -> dict[str, Any]:
    return json.loads(git(server.session_path(session_id), "show", f"{rev}:session.json"))


def index_row(server: Server, session_id: str) -> tuple[Any, ...] | None:
    db = sqlite3.connect(server.data_dir / "index.sqlite3")
    try:
        return db.execute("SELECT title, archived, model FROM sessions WHERE session_id = ?",
                          (session_id,)).fetchone()
    finally:
        db.close()


@pytest.mark.slow
def test_patch_renames_archives_and_sets_the_model(shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "hello")
    status, info = shared_server.api("PATCH", f"/api/sessions/{sid}", {"title": "  Renamed  "})
    assert status == 200, info
    _, described = shared_server.api("GET", f"/api/sessions/{sid}")
    assert info == described  # the session as GET /api/sessions/{id} gives it
    assert info["title"] == "Renamed" and info["archived"] is False
    meta = session_json(shared_server, sid)
    assert meta["title"] == "Renamed" and meta["session_id"] == sid
    # One user-edit commit; git status stays clean.
    path = shared_server.session_path(sid)
    assert "Braid-Kind: user-edit" in git(path, "log", "-1", "--format=%B")
    assert git(path, "status", "--porcelain") == ""
    assert index_row(shared_server, sid) == ("Renamed", 0, None)

    status, info = shared_server.api("PATCH", f"/api/sessions/{sid}",
                                     {"archived": True, "model": "qwen2.5:7b"})
    assert status == 200 and info["archived"] is True and info["model"] == "qwen2.5:7b"
    assert session_json(shared_server, sid)["archived"] is True
    assert index_row(shared_server, sid) == ("Renamed", 1, "qwen2.5:7b")
    _, listed = shared_server.api("GET", "/api/sessions")
    assert sid not in [s["session_id"] for s in listed["sessions"]]
    _, archived = shared_server.api("GET", "/api/sessions?archived=1")
    assert sid in [s["session_id"] for s in archived["sessions"]]

    status, info = shared_server.api("PATCH", f"/api/sessions/{sid}",
                                     {"archived": False, "model": None})
    assert status == 200 and info["archived"] is False and info["model"] is None
    assert "archived" not in session_json(shared_server, sid)
    _, listed = shared_server.api("GET", "/api/sessions")
    assert sid in [s["session_id"] for s in listed["sessions"]]
    # An unchanged update writes no commit.
    head = git(path, "rev-parse", "HEAD")
    assert shared_server.api("PATCH", f"/api/sessions/{sid}", {"title": "Renamed"})[0] == 200
    assert git(path, "rev-parse", "HEAD") == head


@pytest.mark.parametrize("update", BAD_UPDATES)
def test_bad_updates_are_bad_request_and_change_nothing(shared_server: Server,
                                                        update: dict[str, Any]) -> None:
    sid = shared_server.new_session()
    head = git(shared_server.session_path(sid), "rev-parse", "HEAD")
    status, body = shared_server.api("PATCH", f"/api/sessions/{sid}", update)
    assert status == 400 and body["error"]["code"] == "bad_request", body
    assert git(shared_server.session_path(sid), "rev-parse", "HEAD") == head
    assert session_json(shared_server, sid).get("title") == ""


@pytest.mark.slow
def test_rename_reaches_every_branch_and_survives_a_restart(server_factory: Any) -> None:
    server = server_factory()
    sid = server.new_session()
    first = server.run(sid, "write a.txt one")
    status, _ = server.api("POST", f"/api/runs/{first['run_id']}/continue",
                           {"session_id": sid, "continue_from": 1, "input": "other"})
    assert status == 200
    _, info = server.api("GET", f"/api/sessions/{sid}")
    assert info["branch"].startswith("run/")
    server.api("PATCH", f"/api/sessions/{sid}", {"title": "Everywhere"})
    for branch in ("main", info["branch"]):
        assert session_json(server, sid, branch)["title"] == "Everywhere"
    server.stop()
    (server.data_dir / "index.sqlite3").unlink()  # rebuilt from git alone
    server.start()
    _, listed = server.api("GET", "/api/sessions")
    assert [s["title"] for s in listed["sessions"] if s["session_id"] == sid] == ["Everywhere"]


def test_update_session_over_the_socket(shared_server: Server) -> None:
    sid = shared_server.new_session()
    ws = shared_server.socket(sid)
    try:
        reply = ws.call("update_session", title="Via socket")
        assert reply["type"] == "result" and reply["data"]["title"] == "Via socket"
        assert reply["data"]["session_id"] == sid and "runs" in reply["data"]
        bad = ws.call("update_session", archived="yes")
        assert bad["type"] == "error" and bad["error"]["code"] == "bad_request"
        assert ws.call("update_session", title="\x00")["error"]["code"] == "bad_request"
    finally:
        ws.close()


def test_delete_removes_the_folder_and_index_rows(shared_server: Server,
                                                  other_token: str) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write a.txt one")
    path = shared_server.session_path(sid)
    assert path.exists()
    # Another user cannot delete it, nor learn it exists.
    status, body = shared_server.api("DELETE", f"/api/sessions/{sid}", token=other_token)
    assert status == 404 and body["error"]["code"] == "not_found"
    assert path.exists()
    req = urllib.request.Request(f"{shared_server.base_url}/api/sessions/{sid}",
                                 method="DELETE")
    req.add_header("Authorization", f"Bearer {shared_server.token}")
    with urllib.request.urlopen(req, timeout=30) as res:
        assert res.status == 204 and res.read() == b""
    assert not path.exists()
    assert not list(path.parent.glob(f"*{sid}*"))
    db = sqlite3.connect(shared_server.data_dir / "index.sqlite3")
    try:
        assert db.execute("SELECT count(*) FROM sessions WHERE session_id = ?",
                          (sid,)).fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM runs WHERE session_id = ?",
                          (sid,)).fetchone() == (0,)
    finally:
        db.close()
    assert shared_server.api("GET", f"/api/sessions/{sid}")[0] == 404
    assert shared_server.api("DELETE", f"/api/sessions/{sid}")[0] == 404
    assert shared_server.api("DELETE", "/api/sessions/not-an-id")[0] == 404


def test_delete_stops_a_live_run_first(shared_server: Server) -> None:
    sid = shared_server.new_session()
    ws = shared_server.socket(sid)
    try:
        ws.call("send_message", text="slow 200\nsay a long one two three four five six")
        ws.event("message_delta")
        assert shared_server.api("DELETE", f"/api/sessions/{sid}")[0] == 204
    finally:
        ws.close()
    assert not shared_server.session_path(sid).exists()


@pytest.mark.slow
def test_a_half_done_delete_is_finished_at_start(server_factory: Any) -> None:
    server = server_factory()
    sid = server.new_session()
    server.stop()
    # As if killed right after the folder was moved out of the store.
    path = server.session_path(sid)
    path.rename(path.with_name(f".deleted-{sid}"))
    server.start()
    assert not path.with_name(f".deleted-{sid}").exists()
    _, listed = server.api("GET", "/api/sessions")
    assert sid not in [s["session_id"] for s in listed["sessions"]]
