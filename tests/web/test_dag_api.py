"""Sub-agents, merges and the DAG over the real socket (JSON and HTML frames) and the HTTP
API, against a real uvicorn server and the demo model; results checked with the git CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.sync.client import connect

from conftest import Server, assert_fsck, git


def start(srv: Server) -> tuple[str, str]:
    sid = srv.new_session()
    return sid, srv.run(sid, "write base.txt base")["run_id"]


def spawn(srv: Server, sid: str, turn_id: str, prompt: str, **extra: Any) -> dict[str, Any]:
    status, body = srv.api("POST", f"/api/sessions/{sid}/sub_agents",
                           {"parent_turn_id": turn_id, "prompt": prompt, **extra})
    assert status == 200, body
    return body




@pytest.mark.slow
def test_http_spawn_merge_and_dag(shared_server: Server) -> None:
    srv = shared_server
    sid, turn_id = start(srv)
    red = spawn(srv, sid, turn_id, "write red.txt red\nsay red", label="red")
    blue = spawn(srv, sid, turn_id, "write blue.txt blue\nsay blue")
    assert (red["final_text"], blue["final_text"]) == ("red", "blue")
    path = srv.session_path(sid)
    assert git(path, "rev-parse", red["branch"]).strip() == red["commit_id"]
    status, merged = srv.api("POST", f"/api/sessions/{sid}/merge",
                             {"branches": [red["branch"], blue["branch"]], "message": "merge"})
    assert status == 200, merged
    assert merged["final_text"] == "merged: red; blue" and len(merged["parent_ids"]) == 3
    assert sorted(p.name for p in (path / "workdir").iterdir()) == [
        "base.txt", "blue.txt", "red.txt"]

    status, graph = srv.api("GET", f"/api/sessions/{sid}/dag")
    assert status == 200
    node = next(n for n in graph["nodes"] if n["id"] == merged["commit_id"])
    assert node["parent_ids"] == merged["parent_ids"] and node["kind"] == "merge"
    assert {"id", "parent_ids", "kind", "run_id", "branch", "label"} <= set(node)
    tips = {n["id"]: n for n in graph["nodes"]}
    assert tips[red["commit_id"]]["label"] == "red"
    assert tips[red["commit_id"]]["branch"] == red["branch"]
    status, session = srv.api("GET", f"/api/sessions/{sid}")
    assert {b["name"] for b in session["branches"]} == {"main", red["branch"], blue["branch"]}

    # The panel's partials: the graph as SVG, and one node with its own chat and files.
    status, html = srv.page(f"/s/{sid}/dag")
    assert status == 200 and '<div id="dag"' in html and "<svg" in html
    assert html.count(f'data-child="{merged["commit_id"]}"') == 3
    assert f'value="{red["branch"]}"' in html
    status, html = srv.page(f"/s/{sid}/dag/node/{red['commit_id']}")
    assert status == 200 and 'id="dag-detail"' in html
    assert "write red.txt red" in html and "red.txt" in html and "base.txt" in html
    assert "Continue from here" in html
    assert srv.page(f"/s/{sid}/dag/node/{'0' * 40}")[0] == 404
    assert srv.page(f"/s/{sid}/dag/node/HEAD")[0] == 400
    assert_fsck(path)


def test_socket_spawn_events_alias_and_merge_conflict(shared_server: Server) -> None:
    srv = shared_server
    sid, turn_id = start(srv)
    ws = srv.socket(sid)
    try:
        request_id = ws.send("spawn_sub_agent", parent_msg_id=turn_id,
                             prompt="write same.txt red\nsay red", label="r")
        first = ws.reply(request_id, timeout=30)
        assert first["type"] == "result", first
        events = [f["event"] for f in ws.frames if f.get("type") == "event"]
        assert events.index("sub_agent_started") < events.index("run_started") \
            < events.index("sub_agent_done")
        assert "dag_changed" in events
        assert set(first["data"]) >= {"branch", "final_text", "commit_id"}
        second = ws.call("spawn_sub_agent", parent_turn_id=turn_id,
                         prompt="write same.txt blue\nsay blue")
        branches = [first["data"]["branch"], second["data"]["branch"]]
        head = git(srv.session_path(sid), "rev-parse", "HEAD")
        refused = ws.call("merge_branches", branches=branches, message="merge")
        assert refused["type"] == "error" and refused["error"]["code"] == "conflict"
        [conflict] = refused["error"]["details"]["conflicts"]
        assert {k: conflict[k] for k in ("path", "ours", "theirs", "branch", "into")} == {
            "path": "same.txt", "ours": "red\n", "theirs": "blue\n", "branch": branches[1],
            "into": "main"}
        assert conflict["editable"] and "<<<<<<< main" in conflict["merged"]
        assert git(srv.session_path(sid), "rev-parse", "HEAD") == head
        status, body = srv.api("POST", f"/api/sessions/{sid}/merge",
                               {"branches": branches, "message": "merge"})
        assert status == 409 and body["error"]["details"]["conflicts"][0]["path"] == "same.txt"
        done = ws.call("merge_branches", branches=branches, message="m", strategy="theirs")
        assert done["type"] == "result", done
        assert (srv.session_path(sid) / "workdir" / "same.txt").read_text() == "blue\n"
        assert any(f.get("event") == "merged" for f in ws.frames)
        dag = ws.call("get_dag")
        assert len(next(n for n in dag["data"]["nodes"]
                        if n["id"] == done["data"]["commit_id"])["parent_ids"]) == 3
        # Bad input: an error frame, and the socket stays open.
        for params, code in (({"parent_turn_id": "f" * 32, "prompt": "x"}, "not_found"),
                             ({"parent_turn_id": turn_id}, "bad_request"),
                             ({"parent_turn_id": turn_id, "prompt": 3}, "bad_request")):
            reply = ws.call("spawn_sub_agent", **params)
            assert reply["type"] == "error" and reply["error"]["code"] == code, reply
        # A name is a name (no coercion): a string is not a list of branches.
        for params, code in (({"branches": "nope"}, "bad_request"),
                             ({"branches": ["nope"]}, "not_found"),
                             ({"branches": []}, "bad_request"),
                             ({"branches": branches, "strategy": "x"}, "bad_request")):
            reply = ws.call("merge_branches", **params)
            assert reply["type"] == "error" and reply["error"]["code"] == code, reply
        assert ws.call("get_dag")["type"] == "result"
    finally:
        ws.close()


def test_html_frames_keep_the_child_out_of_the_transcript(shared_server: Server) -> None:
    srv = shared_server
    sid, turn_id = start(srv)
    with connect(f"{srv.ws_url}/ws/sessions/{sid}?format=html",
                 additional_headers={"Authorization": f"Bearer {srv.token}"}) as html_ws:
        status, result = srv.api("POST", f"/api/sessions/{sid}/sub_agents",
                                 {"parent_turn_id": turn_id, "prompt": "write k.txt x\nsay kid"})
        assert status == 200
        frames = []
        # The child's own end redraws its card; sub_agent_done then appends its result.
        while not any('id="sub-card-' in f and "completed" in f for f in frames) or \
                not any(f'id="turn-{result["summary_run_id"]}"' in f for f in frames):
            frames.append(html_ws.recv(timeout=20))
        text = "".join(frames)
        run_id = result["run_id"]
        assert f'id="sub-card-{run_id}"' in text and f'id="parts-{run_id}"' in text
        assert f'id="turn-{run_id}"' not in text  # never drawn as a turn of the parent
        assert '<div id="dag"' in text  # dag_changed redraws the graph
        assert result["branch"] in text and "kid" in text
        # The result message is appended to the parent's transcript.
        assert '<div id="transcript" hx-swap-oob="beforeend">' in text
        assert f'id="turn-{result["summary_run_id"]}"' in text


def test_another_users_session_is_not_found(shared_server: Server, other_token: str) -> None:
    srv = shared_server
    sid, turn_id = start(srv)
    for method, path, body in (
            ("POST", f"/api/sessions/{sid}/sub_agents", {"parent_turn_id": turn_id,
                                                          "prompt": "say x"}),
            ("POST", f"/api/sessions/{sid}/merge", {"branches": ["main"]}),
            ("GET", f"/api/sessions/{sid}/dag", None)):
        status, reply = srv.api(method, path, body, token=other_token)
        assert status == 404 and reply["error"]["code"] == "not_found", (path, reply)
    status, reply = srv.api("POST", f"/api/sessions/{sid}/sub_agents", [1, 2])
    assert status == 400
    assert git(srv.session_path(sid), "branch", "--list", "sub_*") == ""
    status, graph = srv.api("GET", f"/api/sessions/{sid}/dag")
    assert json.dumps(graph).count('"merge"') == 0


@pytest.mark.slow
def test_a_sub_agent_killed_with_the_server_is_interrupted_on_its_branch(
        server_factory: Any, tmp_path: Any) -> None:
    import signal

    data_dir = tmp_path / "data"
    first = server_factory(data_dir)
    sid, turn_id = start(first)
    ws = first.socket(sid)
    ws.send("spawn_sub_agent", parent_turn_id=turn_id, label="doomed",
            prompt="write half.txt half\nbatch\nslow 300\nsay " + " ".join(["word"] * 40))
    started = ws.event("sub_agent_started")["data"]
    ws.event("message_delta", timeout=30)  # the first batch is committed, the answer streams
    first.stop(signal.SIGKILL)
    path = first.session_path(sid)
    assert len(git(path, "worktree", "list").splitlines()) == 2

    second = server_factory(data_dir)
    status, run = second.api("GET", f"/api/runs/{started['run_id']}?session_id={sid}")
    assert status == 200, run
    assert run["status"] == "INTERRUPTED" and run["branch"] == started["branch"]
    assert [m["role"] for m in run["messages"]][:3] == ["user", "assistant", "tool"]
    record = json.loads(git(path, "show",
                            f"{started['branch']}:runs/000/00/{started['run_id']}.json"))
    assert record["status"] == "INTERRUPTED"
    assert git(path, "show", f"{started['branch']}:workdir/half.txt") == "half\n"
    assert len(git(path, "worktree", "list").splitlines()) == 1
    assert not (path / "_worktrees" / started["branch"]).exists()
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)
    # The session goes on: a new sub-agent works.
    assert spawn(second, sid, turn_id, "say again")["final_text"] == "again"


def test_the_graph_partial_limits_rows_and_shows_more(shared_server: Server) -> None:
    srv = shared_server
    sid, _ = start(srv)
    for i in range(4):
        srv.run(sid, f"say turn {i}")
    status, html = srv.page(f"/s/{sid}/dag?rows=3")
    assert status == 200
    assert html.count('class="dag-node') == 3 and "Show more" in html
    assert f"/s/{sid}/dag?rows=6" in html
    status, html = srv.page(f"/s/{sid}/dag")
    assert "Show more" not in html
    # Folded: the first turn's tool-batch commit is counted in its turn's row.
    assert html.count('class="dag-node') == 6 and ">+1<" in html
    assert srv.page(f"/s/{sid}/dag?rows=many")[0] == 400
    assert srv.page(f"/s/{'0' * 32}/dag")[0] == 404


def test_http_and_socket_merge_with_files_resolved_by_hand(shared_server: Server) -> None:
    srv = shared_server
    for transport in ("http", "socket"):
        sid, turn_id = start(srv)
        branches = [spawn(srv, sid, turn_id, f"write same.txt {c}\nsay {c}")["branch"]
                    for c in ("red", "blue")]
        params = {"branches": branches, "message": "m", "resolutions": {"same.txt": "purple\n"}}
        if transport == "http":
            status, body = srv.api("POST", f"/api/sessions/{sid}/merge", params)
            assert status == 200, body
            result = body
        else:
            ws = srv.socket(sid)
            try:
                reply = ws.call("merge_branches", **params)
                bad = ws.call("merge_branches", branches=branches, resolutions={"x": 1})
                assert bad["type"] == "error" and bad["error"]["code"] == "bad_request", bad
            finally:
                ws.close()
            assert reply["type"] == "result", reply
            result = reply["data"]
        path = srv.session_path(sid)
        assert (path / "workdir" / "same.txt").read_text() == "purple\n"
        parents = git(path, "rev-list", "--parents", "-n", "1", result["commit_id"]).split()
        assert len(parents) == 4  # the commit and its three parents
        assert git(path, "status", "--porcelain") == ""
        assert_fsck(path)

