"""Reverting turns over the real socket (JSON and HTML frames) and the HTTP API, against a
real uvicorn server and the demo model; results checked on disk and with the git CLI."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from conftest import Server, assert_fsck, git

LINES = "\\n".join(f"line {i}" for i in range(1, 9))


def files(work: Path) -> dict[str, str]:
    return {p.relative_to(work).as_posix(): p.read_text()
            for p in sorted(work.rglob("*")) if p.is_file()}


def two_turns(srv: Server) -> tuple[str, Path, str, dict[str, str], dict[str, str]]:
    sid = srv.new_session()
    work = srv.session_path(sid) / "workdir"
    srv.run(sid, "write a.txt alpha\nwrite b.txt beta")
    after1 = files(work)
    turn2 = srv.run(sid, "write a.txt alpha two\ndelete b.txt\nwrite c.txt gamma")
    return sid, work, turn2["run_id"], after1, files(work)


@pytest.mark.slow
def test_socket_actions_and_events_in_two_tabs(shared_server: Server) -> None:
    sid, work, tid, after1, after2 = two_turns(shared_server)
    tab1, tab2 = shared_server.socket(sid), shared_server.socket(sid)
    try:
        listed = tab1.call("list_turn_files", turn_id=tid)
        assert listed["type"] == "result", listed
        assert listed["data"]["paths"] == [{"path": "a.txt", "status": "modified"},
                                           {"path": "b.txt", "status": "deleted"},
                                           {"path": "c.txt", "status": "added"}]
        diff = tab1.call("turn_diff", turn_id=tid, path="c.txt")["data"]["diff"]
        assert "+++ b/c.txt" in diff and "+gamma" in diff

        reverted = tab1.call("revert_turn", turn_id=tid)
        assert reverted["type"] == "result", reverted
        data = reverted["data"]
        assert data["restored_paths"] == ["a.txt", "b.txt", "c.txt"]
        assert data["conflicts"] == [] and len(data["commit_id"]) == 40
        assert files(work) == after1
        # The other tab hears of it: the event names the turn and carries its new state.
        event = tab2.event("reverted")["data"]
        assert event["run_id"] == tid and event["reverted"] is True
        assert event["session_id"] == sid and event["commit_id"] == data["commit_id"]
        checkpoint = next(f["data"] for f in tab2.frames if f.get("event") == "checkpoint"
                          and f["data"].get("kind") == "revert")
        assert checkpoint["kind"] == "revert" and checkpoint["commit_id"] == data["commit_id"]

        # assistant_msg_id is the protocol's alias of turn_id.
        redone = tab2.call("unrevert_turn", assistant_msg_id=tid)
        assert redone["type"] == "result", redone
        assert files(work) == after2
        # Tab 1 hears of the redo too (after the revert's own event).
        tab1.until(lambda f: f.get("event") == "reverted" and f["data"]["reverted"] is False)
        repo = shared_server.session_path(sid)
        kinds = git(repo, "log", "-2", "--format=%(trailers:key=Braid-Kind,valueonly)").split()
        assert kinds == ["unrevert", "revert"]
        assert git(repo, "status", "--porcelain") == ""
        assert_fsck(repo)
    finally:
        tab1.close()
        tab2.close()


def test_socket_errors_are_clear_and_keep_the_socket(shared_server: Server) -> None:
    sid, work, tid, _, after2 = two_turns(shared_server)
    other_sid, _, other_tid, _, _ = two_turns(shared_server)
    head = git(shared_server.session_path(sid), "rev-parse", "HEAD")
    sock = shared_server.socket(sid)
    try:
        for params, code in [
            ({"turn_id": "0" * 32}, "not_found"),
            ({"turn_id": other_tid}, "not_found"),  # a turn of another session
            ({"turn_id": "../../x"}, "not_found"),
            ({"turn_id": 7}, "bad_request"),
            ({}, "bad_request"),
            ({"turn_id": tid, "force": "perhaps"}, "bad_request"),
        ]:
            reply = sock.call("revert_turn", **params)
            assert reply["type"] == "error" and reply["error"]["code"] == code, (params, reply)
        reply = sock.call("unrevert_turn", turn_id=tid)
        assert reply["error"]["code"] == "conflict" and "not reverted" in reply["error"]["message"]
        reply = sock.call("turn_diff", turn_id=tid, path="nope.txt")
        assert reply["error"]["code"] == "not_found"
        assert git(shared_server.session_path(sid), "rev-parse", "HEAD") == head
        assert files(work) == after2
        assert sock.call("revert_turn", turn_id=tid)["type"] == "result"
        twice = sock.call("revert_turn", turn_id=tid)
        assert twice["error"]["code"] == "conflict"
        assert "already reverted" in twice["error"]["message"]
        assert sock.call("list_turn_files", turn_id=tid)["data"]["reverted"] is True
    finally:
        sock.close()
    assert other_sid != sid


def test_http_api(shared_server: Server, other_token: str) -> None:
    sid, work, tid, after1, after2 = two_turns(shared_server)
    status, body = shared_server.api("GET", f"/api/turns/{tid}/files?session_id={sid}")
    assert status == 200 and [p["path"] for p in body["paths"]] == ["a.txt", "b.txt", "c.txt"]
    status, body = shared_server.api("GET", f"/api/turns/{tid}/diff?session_id={sid}&path=a.txt")
    assert status == 200 and "+alpha two" in body["diff"]
    for path, token in [(f"/api/turns/{tid}/files?session_id={sid}", other_token),
                        (f"/api/turns/{'1' * 32}/files?session_id={sid}", None)]:
        status, body = shared_server.api("GET", path, token=token)
        assert status == 404 and body["error"]["code"] == "not_found", (path, body)
    # A missing parameter is bad input (DESIGN §5), not an unknown session.
    status, body = shared_server.api("GET", f"/api/turns/{tid}/files")
    assert status == 400 and body["error"]["code"] == "bad_request", body
    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert",
                                     {"session_id": sid}, token=other_token)
    assert status == 404 and files(work) == after2
    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert",
                                     {"session_id": sid, "force": [1]})
    assert status == 400 and body["error"]["code"] == "bad_request"

    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert", {"session_id": sid})
    assert status == 200 and body["restored_paths"] == ["a.txt", "b.txt", "c.txt"]
    assert files(work) == after1
    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert", {"session_id": sid})
    assert status == 409 and body["error"]["code"] == "conflict"
    status, body = shared_server.api("POST", f"/api/turns/{tid}/unrevert", {"session_id": sid})
    assert status == 200 and files(work) == after2


def test_http_conflict_lists_files_and_force_then_redo(shared_server: Server) -> None:
    sid = shared_server.new_session()
    work = shared_server.session_path(sid) / "workdir"
    shared_server.run(sid, f"write a.txt {LINES}")
    turn1 = shared_server.run(sid, f"write a.txt {LINES.replace('line 2', 'line 2 by 1')}")
    shared_server.run(sid, f"write a.txt {LINES.replace('line 2', 'line 2 by 3')}")
    before = files(work)
    status, body = shared_server.api("POST", f"/api/turns/{turn1['run_id']}/revert",
                                     {"session_id": sid})
    assert status == 409, body
    conflicts = body["error"]["details"]["conflicts"]
    assert [c["path"] for c in conflicts] == ["a.txt"]
    assert set(conflicts[0]) == {"path", "ours", "theirs"}
    assert files(work) == before
    status, body = shared_server.api("POST", f"/api/turns/{turn1['run_id']}/revert",
                                     {"session_id": sid, "force": True})
    assert status == 200 and [c["path"] for c in body["conflicts"]] == ["a.txt"]
    assert files(work)["a.txt"] == LINES.replace("\\n", "\n") + "\n"
    status, body = shared_server.api("POST", f"/api/turns/{turn1['run_id']}/unrevert",
                                     {"session_id": sid})
    assert status == 200 and files(work) == before
    assert_fsck(shared_server.session_path(sid))


def html_frames_until(sock: Any, marker: str) -> list[str]:
    frames: list[str] = []
    while not any(marker in f for f in frames):
        frames.append(str(sock.recv(timeout=20)))
    return frames


def test_html_frames_render_chips_diffs_badges_and_conflicts(shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, f"write a.txt {LINES}")
    with connect(f"{shared_server.ws_url}/ws/sessions/{sid}",
                 additional_headers={"Authorization": f"Bearer {shared_server.token}",
                                     "Origin": shared_server.base_url}, open_timeout=10) as sock:
        changed = LINES.replace("line 2", "line 2 by 1")
        sock.send(json.dumps({"action": "send_message", "text": f"write a.txt {changed}"}))
        done = html_frames_until(sock, 'data-status="COMPLETED"')[-1]
        tid = done.split('data-run-id="')[1][:32]
        # The finished bubble carries its chips and Revert button (no request per bubble).
        assert 'class="chip chip-modified"' in done and 'data-path="a.txt"' in done
        # Its Revert menu (of the turn it is in); the confirmation is drawn once a page
        # (_turn_pops.html), not per turn.
        assert 'class="revert-menu" data-count="1"' in done
        assert "revert-btn" in done and "revert_turn" not in done

        sock.send(json.dumps({"action": "turn_diff", "turn_id": tid, "path": "a.txt"}))
        diff = html_frames_until(sock, f'id="diff-{tid}"')[-1]
        assert '<span class="dl dl-add">+line 2 by 1</span>' in diff
        assert '<span class="dl dl-del">-line 2</span>' in diff

        shared_server.run(sid, f"write a.txt {LINES.replace('line 2', 'line 2 by 3')}")
        sock.send(json.dumps({"action": "revert_turn", "turn_id": tid}))
        toast = html_frames_until(sock, "revert-conflict")[-1]
        assert toast.startswith('<div id="toasts" hx-swap-oob="beforeend">')
        # Its button sends the same revert, forced (through the page's #act-form).
        force = json.loads(html.unescape(toast.split("data-force='")[1].split("'")[0]))
        assert force == {"action": "revert_turn", "turn_id": tid, "force": True}
        assert "<code>a.txt</code>" in toast
        assert "Revert anyway" in toast

        sock.send(json.dumps({"action": "revert_turn", "turn_id": tid, "force": "true"}))
        frames = html_frames_until(sock, f'hx-swap-oob="innerHTML:#footer-{tid}"')
        footer = next(f for f in frames if f'hx-swap-oob="innerHTML:#footer-{tid}"' in f)
        assert "badge-reverted" in footer and "unrevert_turn" in footer
        assert 'id="transcript" hx-swap-oob="beforeend"' in footer
        assert f'title="{tid}">Turn ' in footer and "</span> was reverted" in footer


@pytest.mark.slow
def test_shell_created_file_is_a_chip_and_reverted(server_factory: Any) -> None:
    srv = server_factory(BRAID_SHELL="on")
    sid = srv.new_session()
    work = srv.session_path(sid) / "workdir"
    turn = srv.run(sid, "shell echo made > made.txt\nwrite tool.txt t")
    status, body = srv.api("GET", f"/api/turns/{turn['run_id']}/files?session_id={sid}")
    assert status == 200, body
    assert body["paths"] == [{"path": "made.txt", "status": "added"},
                             {"path": "tool.txt", "status": "added"}]
    status, body = srv.api("POST", f"/api/turns/{turn['run_id']}/revert", {"session_id": sid})
    assert status == 200 and files(work) == {}
    assert_fsck(srv.session_path(sid))
