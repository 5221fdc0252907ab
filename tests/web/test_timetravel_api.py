"""Time travel over the real server: `continue_run`, `list_checkpoints` and `fork_session` on the
JSON socket and the HTTP API (DESIGN §5), their errors, and the repositories they leave."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import Server, assert_fsck, git


def runs_of(server: Server, session_id: str) -> list[dict[str, Any]]:
    status, info = server.api("GET", f"/api/sessions/{session_id}")
    assert status == 200, info
    return list(info["runs"])


def refs(server: Server, session_id: str) -> str:
    return git(server.session_path(session_id), "for-each-ref")


@pytest.mark.slow
def test_continue_run_on_the_socket_forks_with_events(shared_server: Server) -> None:
    sid = shared_server.new_session()
    source = shared_server.run(sid, "write x.txt one")
    ws = shared_server.socket(sid)
    try:
        reply = ws.call("continue_run", run_id=source["run_id"], continue_from="last_user",
                        input="say branched")
        assert reply["type"] == "result", reply
        data = reply["data"]
        new_id = data["run_id"]
        assert data["status"] == "RUNNING" and data["forked"] is True
        assert data["forked_from_run_id"] == source["run_id"]
        assert data["forked_from_message_index"] == data["message_index"] == 1
        assert data["branch"] == f"run/{new_id}"
        done = ws.event("run_completed")
        assert done["data"]["run_id"] == new_id
        assert done["data"]["messages"][-1]["content"] == "branched"
        seen = [f.get("event") for f in ws.frames if f.get("type") == "event"]
        # The page is told to show the new branch before the run starts; a fork checkpoint.
        assert seen.index("run_continued") < seen.index("run_started")
        checkpoints = [f["data"] for f in ws.frames if f.get("event") == "checkpoint"]
        assert checkpoints[0]["kind"] == "fork" and checkpoints[0]["run_id"] == new_id
        continued = next(f["data"] for f in ws.frames if f.get("event") == "run_continued")
        assert continued["branch"] == f"run/{new_id}"

        timeline = ws.call("list_checkpoints", run_id=new_id)["data"]
        assert timeline["run_id"] == new_id
        assert [c["message_index"] for c in timeline["checkpoints"]] == [0, 1, 2, 3]
        assert set(timeline["checkpoints"][0]) >= {"message_index", "commit_id", "kind",
                                                   "created_at", "preview"}
        # The alias of the run id.
        alias = ws.call("list_checkpoints", assistant_msg_id=new_id)["data"]
        assert alias == timeline
    finally:
        ws.close()
    path = shared_server.session_path(sid)
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"run/{new_id}"
    assert not (path / "workdir/x.txt").exists()
    assert_fsck(path)


def test_socket_errors_keep_the_socket_open_and_create_nothing(shared_server: Server) -> None:
    sid = shared_server.new_session()
    source = shared_server.run(sid, "write a.txt 1\nwrite b.txt 2")
    before = (refs(shared_server, sid), runs_of(shared_server, sid))
    ws = shared_server.socket(sid)
    try:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"run_id": source["run_id"], "continue_from": -1, "input": "x"}, "bad_request"),
            ({"run_id": source["run_id"], "continue_from": 6, "input": "x"}, "bad_request"),
            ({"run_id": source["run_id"], "continue_from": "2"}, "bad_request"),
            ({"run_id": source["run_id"], "fork": "yes"}, "bad_request"),
            ({"run_id": source["run_id"], "input": ["x"]}, "bad_request"),
            ({"run_id": "f" * 32, "input": "x"}, "not_found"),
            ({"run_id": 12}, "bad_request"),
            ({}, "bad_request"),
        ]
        for params, code in cases:
            reply = ws.call("continue_run", **params)
            assert reply["type"] == "error", (params, reply)
            assert reply["error"]["code"] == code, (params, reply)
        reply = ws.call("continue_run", run_id=source["run_id"], continue_from=6, input="x")
        assert reply["error"]["details"] == {"message_count": 5}
        assert ws.call("list_checkpoints", run_id="0" * 32)["error"]["code"] == "not_found"
        # Still open and working.
        ok = ws.call("list_checkpoints", run_id=source["run_id"])
        assert [c["message_index"] for c in ok["data"]["checkpoints"]] == [0, 1, 4, 5]
    finally:
        ws.close()
    assert (refs(shared_server, sid), runs_of(shared_server, sid)) == before


def test_http_continue_waits_and_reports_lineage(shared_server: Server) -> None:
    sid = shared_server.new_session()
    source = shared_server.run(sid, "write a.txt 1\nwrite b.txt 2\nbatch\nwrite c.txt 3")
    status, run = shared_server.api("POST", f"/api/runs/{source['run_id']}/continue",
                                    {"session_id": sid, "continue_from": 5, "input": "recall"})
    assert status == 200, run
    assert run["status"] == "COMPLETED"
    assert run["forked_from_message_index"] == 4  # 5 is inside the second batch: snapped
    assert run["messages"][-1]["content"] == \
        "write a.txt 1\nwrite b.txt 2\nbatch\nwrite c.txt 3 | recall"
    path = shared_server.session_path(sid)
    assert sorted(p.name for p in (path / "workdir").iterdir()) == ["a.txt", "b.txt"]
    rows = {r["run_id"]: r for r in runs_of(shared_server, sid)}
    assert rows[run["run_id"]]["forked_from_run_id"] == source["run_id"]
    assert rows[run["run_id"]]["forked_from_message_index"] == 4
    assert rows[source["run_id"]]["status"] == "COMPLETED"

    status, regen = shared_server.api("POST", f"/api/runs/{source['run_id']}/continue",
                                      {"session_id": sid, "regenerate": True})
    assert status == 200 and regen["regenerated_from"] == source["run_id"]
    assert regen["messages"][-1]["content"] == "done: wrote a.txt, wrote b.txt, wrote c.txt"
    assert {r["run_id"]: r for r in runs_of(shared_server, sid)}[source["run_id"]]["status"] \
        == "REGENERATED"

    status, points = shared_server.api(
        "GET", f"/api/runs/{source['run_id']}/checkpoints?session_id={sid}")
    assert status == 200
    assert [c["message_index"] for c in points["checkpoints"]] == [0, 1, 4, 6, 7]
    assert_fsck(path)


def test_http_errors(shared_server: Server, other_token: str) -> None:
    sid = shared_server.new_session()
    source = shared_server.run(sid, "say hi")
    before = (refs(shared_server, sid), runs_of(shared_server, sid))
    url = f"/api/runs/{source['run_id']}/continue"
    for body in ({"session_id": sid, "continue_from": -1, "input": "x"},
                 {"session_id": sid, "continue_from": 3, "input": "x"},
                 {"session_id": sid, "continue_from": None, "regenerate": "true"}):
        status, err = shared_server.api("POST", url, body)
        assert status == 400 and err["error"]["code"] == "bad_request", (body, err)
    status, err = shared_server.api("POST", f"/api/runs/{'e' * 32}/continue",
                                    {"session_id": sid, "input": "x"})
    assert status == 404 and err["error"]["code"] == "not_found"
    status, err = shared_server.api("GET", f"/api/runs/{source['run_id']}/checkpoints")
    assert status == 400
    status, err = shared_server.api("POST", url, {"input": "x"})  # no session_id
    assert status == 400 and err["error"]["code"] == "bad_request"
    # Another user sees none of it.
    for method, path, body in (
            ("POST", url, {"session_id": sid, "input": "x"}),
            ("GET", f"/api/runs/{source['run_id']}/checkpoints?session_id={sid}", None),
            ("POST", f"/api/sessions/{sid}/fork", {})):
        status, err = shared_server.api(method, path, body, token=other_token)
        assert status == 404 and err["error"]["code"] == "not_found", (path, err)
    assert (refs(shared_server, sid), runs_of(shared_server, sid)) == before
    status, listed = shared_server.api("GET", "/api/sessions", token=other_token)
    assert listed["sessions"] == []


def test_fork_session_over_http_and_socket(shared_server: Server) -> None:
    sid = shared_server.new_session()
    source = shared_server.run(sid, "write a.txt root")
    status, made = shared_server.api("POST", f"/api/sessions/{sid}/fork", {})
    assert status == 201, made
    mid = made["session_id"]
    assert made["forked_from_session_id"] == sid and made["root_session_id"] == sid
    ws = shared_server.socket(mid)
    try:
        leaf_made = ws.call("fork_session")["data"]
    finally:
        ws.close()
    leaf = leaf_made["session_id"]
    assert leaf_made["forked_from_session_id"] == mid and leaf_made["root_session_id"] == sid
    status, info = shared_server.api("GET", f"/api/sessions/{leaf}")
    assert status == 200
    assert (info["forked_from_session_id"], info["root_session_id"]) == (mid, sid)
    assert [r["run_id"] for r in info["runs"]] == [source["run_id"]]
    meta = json.loads(git(shared_server.session_path(leaf), "show", "HEAD:session.json"))
    assert (meta["session_id"], meta["forked_from_session_id"], meta["root_session_id"]) == \
        (leaf, mid, sid)
    # Work in the leaf leaves the root alone.
    root_refs = refs(shared_server, sid)
    shared_server.run(leaf, "write b.txt leaf")
    status, _ = shared_server.api("POST", f"/api/runs/{source['run_id']}/continue",
                                  {"session_id": leaf, "continue_from": 0, "input": "say x"})
    assert status == 200
    assert refs(shared_server, sid) == root_refs
    assert not (shared_server.session_path(sid) / "workdir/b.txt").exists()
    for session_id in (sid, mid, leaf):
        assert_fsck(shared_server.session_path(session_id))
