"""Per-file revert and the rewinds over the real socket and their HTTP twins, against a real
uvicorn server and the demo model; checked on disk and with the git CLI
(`git -C <session> log` / `show`)."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from conftest import Server, assert_fsck, git


def files(work: Path) -> dict[str, str]:
    return {p.relative_to(work).as_posix(): p.read_text()
            for p in sorted(work.rglob("*")) if p.is_file()}


def kind(repo: Path, rev: str = "HEAD") -> str:
    return git(repo, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)", rev).strip()


def record(repo: Path, run_id: str, rev: str = "HEAD") -> dict[str, object]:
    names = git(repo, "ls-tree", "-r", "--name-only", rev, "runs/").split()
    name = next(n for n in names if n.endswith(f"{run_id}.json"))
    loaded: dict[str, object] = json.loads(git(repo, "show", f"{rev}:{name}"))
    return loaded


def changed(repo: Path) -> list[str]:
    return git(repo, "show", "--format=", "--name-only", "HEAD", "--", "workdir").split()


def a_turn(srv: Server) -> tuple[str, Path, Path, str]:
    sid = srv.new_session()
    repo = srv.session_path(sid)
    srv.run(sid, "write a.txt one\nwrite b.txt two")
    turn = srv.run(sid, "write a.txt one more\ndelete b.txt\nwrite c.txt three")
    return sid, repo, repo / "workdir", turn["run_id"]


def test_per_file_revert_and_redo_over_the_socket(shared_server: Server) -> None:
    sid, repo, work, tid = a_turn(shared_server)
    tab1, tab2 = shared_server.socket(sid), shared_server.socket(sid)
    try:
        reply = tab1.call("revert_turn", turn_id=tid, paths=["c.txt"])
        assert reply["type"] == "result", reply
        data = reply["data"]
        assert data["restored_paths"] == ["c.txt"] and data["conflicts"] == []
        assert git(repo, "rev-parse", "HEAD").strip() == data["commit_id"]
        assert kind(repo) == "revert" and changed(repo) == ["workdir/c.txt"]
        assert "c.txt" not in files(work) and files(work)["a.txt"] == "one more\n"
        event = tab2.event("reverted")["data"]
        assert event["run"]["reverted_files"] == ["c.txt"] and event["run"]["reverted"] is False
        listed = tab1.call("list_turn_files", turn_id=tid)["data"]
        assert listed["reverted_files"] == ["c.txt"] and listed["reverted"] is False

        for params, code in [({"paths": ["nope.txt"]}, "bad_request"),
                             ({"paths": "c.txt"}, "bad_request"),
                             ({"paths": []}, "bad_request"),
                             ({"paths": [3]}, "bad_request"),
                             ({"paths": ["c.txt"]}, "conflict")]:
            reply = tab1.call("revert_turn", turn_id=tid, **params)
            assert reply["type"] == "error" and reply["error"]["code"] == code, (params, reply)
        reply = tab1.call("unrevert_turn", turn_id=tid, paths=["a.txt"])
        assert reply["error"]["code"] == "conflict" and "not reverted" in reply["error"]["message"]

        # The whole turn now: the rest only.
        reply = tab1.call("revert_turn", turn_id=tid)
        assert reply["data"]["restored_paths"] == ["a.txt", "b.txt"]
        assert record(repo, tid)["reverted"] is True
        # Redo one file.
        reply = tab2.call("unrevert_turn", turn_id=tid, paths=["c.txt"])
        assert reply["type"] == "result" and reply["data"]["restored_paths"] == ["c.txt"]
        assert kind(repo) == "unrevert" and files(work)["c.txt"] == "three\n"
        assert record(repo, tid)["reverted_files"] == ["a.txt", "b.txt"]
        kinds = git(repo, "log", "-3", "--format=%(trailers:key=Braid-Kind,valueonly)").split()
        assert kinds == ["unrevert", "revert", "revert"]
        assert git(repo, "status", "--porcelain") == ""
        assert_fsck(repo)
    finally:
        tab1.close()
        tab2.close()


def test_per_file_revert_over_http(shared_server: Server) -> None:
    sid, repo, work, tid = a_turn(shared_server)
    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert",
                                     {"session_id": sid, "paths": ["a.txt", "b.txt"]})
    assert status == 200, body
    assert body["restored_paths"] == ["a.txt", "b.txt"]
    assert files(work) == {"a.txt": "one\n", "b.txt": "two\n", "c.txt": "three\n"}
    assert sorted(changed(repo)) == ["workdir/a.txt", "workdir/b.txt"]
    status, body = shared_server.api("POST", f"/api/turns/{tid}/revert",
                                     {"session_id": sid, "paths": ["x.txt"]})
    assert status == 400 and body["error"]["code"] == "bad_request", body
    status, body = shared_server.api("GET", f"/api/turns/{tid}/files?session_id={sid}")
    assert body["reverted_files"] == ["a.txt", "b.txt"]
    status, body = shared_server.api("POST", f"/api/turns/{tid}/unrevert",
                                     {"session_id": sid, "paths": ["b.txt"]})
    assert status == 200 and body["restored_paths"] == ["b.txt"], body
    assert "b.txt" not in files(work) and kind(repo) == "unrevert"
    assert_fsck(repo)


def wait_idle(srv: Server, sid: str) -> None:
    for _ in range(200):
        runs = srv.api("GET", f"/api/sessions/{sid}")[1]["runs"]
        if all(r["status"] != "RUNNING" for r in runs):
            return
        time.sleep(0.05)
    raise AssertionError("a run never ended")


def test_continue_keep_files_over_the_socket_and_http(shared_server: Server) -> None:
    sid = shared_server.new_session()
    repo = shared_server.session_path(sid)
    first = shared_server.run(sid, "write a.txt one")
    shared_server.run(sid, "write b.txt two")
    head_files = git(repo, "rev-parse", "main:workdir").strip()
    sock = shared_server.socket(sid)
    try:
        reply = sock.call("continue_run", run_id=first["run_id"], continue_from=0,
                          input="say fresh", keep_files=True)
        assert reply["type"] == "result", reply
        new_id = reply["data"]["run_id"]
        sock.until(lambda f: f.get("event") == "run_completed"
                   and f["data"].get("run_id") == new_id)
        reply = sock.call("continue_run", run_id=first["run_id"], keep_files="yes")
        assert reply["error"]["code"] == "bad_request"
    finally:
        sock.close()
    branch = f"run/{new_id}"
    # The sibling's files are main's current ones (a.txt and b.txt), not the checkpoint's
    # (none, before the first run).
    fork = git(repo, "log", "--format=%H", "-1", "--grep=Braid-Kind: fork", branch).strip()
    assert git(repo, "rev-parse", f"{fork}:workdir").strip() == head_files
    assert files(repo / "workdir") == {"a.txt": "one\n", "b.txt": "two\n"}
    assert record(repo, new_id, branch)["keep_files"] is True

    # Its HTTP twin (back on main first).
    sock = shared_server.socket(sid)
    assert sock.call("checkout", ref="main")["type"] == "result"
    sock.close()
    status, body = shared_server.api("POST", f"/api/runs/{first['run_id']}/continue",
                                     {"session_id": sid, "continue_from": 0,
                                      "input": "write c.txt three", "keep_files": True})
    assert status == 200 and body["status"] == "COMPLETED", body
    assert [m["content"] for m in body["messages"] if m["role"] == "user"] == \
        ["write c.txt three"]
    assert files(repo / "workdir") == {"a.txt": "one\n", "b.txt": "two\n", "c.txt": "three\n"}
    assert git(repo, "status", "--porcelain") == ""
    assert_fsck(repo)


def test_rewind_files_over_the_socket_then_undo(shared_server: Server) -> None:
    sid = shared_server.new_session()
    repo = shared_server.session_path(sid)
    work = repo / "workdir"
    first = shared_server.run(sid, "write a.txt one")
    second = shared_server.run(sid, "write a.txt changed\nwrite b.txt two")
    count = len(git(repo, "ls-tree", "-r", "--name-only", "HEAD", "history/").split())
    tab1, tab2 = shared_server.socket(sid), shared_server.socket(sid)
    try:
        reply = tab1.call("rewind_files", run_id=second["run_id"], message_index=0)
        assert reply["type"] == "result", reply
        data = reply["data"]
        assert set(data) >= {"turn_id", "commit_id", "restored_paths"}
        assert data["restored_paths"] == ["a.txt", "b.txt"]
        assert files(work) == {"a.txt": "one\n"}
        assert git(repo, "rev-parse", "HEAD").strip() == data["commit_id"]
        assert kind(repo) == "revert"
        # The conversation kept: every message still there, plus the note.
        after = git(repo, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
        assert len(after) == count + 1
        event = tab2.event("reverted")["data"]
        assert event["rewind"]["run_id"] == second["run_id"]
        assert event["rewind"]["message_id"] == second["messages"][0]["id"]

        for params, code in [({"message_index": 99}, "bad_request"),
                             ({"message_index": -1}, "bad_request"),
                             ({"message_index": "1"}, "bad_request"),
                             ({}, "bad_request"),
                             ({"message_index": 0, "run_id": "0" * 32}, "not_found")]:
            reply = tab1.call("rewind_files", **{"run_id": second["run_id"], **params})
            assert reply["type"] == "error" and reply["error"]["code"] == code, (params, reply)

        reply = tab1.call("unrevert_turn", turn_id=data["turn_id"])
        assert reply["type"] == "result", reply
        assert files(work) == {"a.txt": "changed\n", "b.txt": "two\n"}
        assert kind(repo) == "unrevert"
        again = tab1.call("unrevert_turn", turn_id=data["turn_id"])
        assert again["error"]["code"] == "conflict"
        assert git(repo, "status", "--porcelain") == ""
        assert_fsck(repo)
    finally:
        tab1.close()
        tab2.close()
    assert first["run_id"] != second["run_id"]


def test_rewind_files_over_http_and_busy(shared_server: Server) -> None:
    sid = shared_server.new_session()
    repo = shared_server.session_path(sid)
    first = shared_server.run(sid, "write a.txt one")
    status, body = shared_server.api("POST", f"/api/runs/{first['run_id']}/rewind_files",
                                     {"session_id": sid, "message_index": 0})
    assert status == 200, body
    assert not (repo / "workdir/a.txt").exists() and kind(repo) == "revert"
    status, body = shared_server.api("POST", f"/api/runs/{first['run_id']}/rewind_files",
                                     {"session_id": sid, "message_index": 7})
    assert status == 400 and body["error"]["code"] == "bad_request"
    status, body = shared_server.api("POST", f"/api/turns/{first['run_id']}/unrevert",
                                     {"session_id": sid})
    # The run itself was not reverted; the rewind is undone by its own id.
    assert status == 409
    # Busy: a slow run holds the branch.
    sock = shared_server.socket(sid)
    try:
        assert sock.call("send_message", text="slow 500\nsay slowly")["type"] == "result"
        reply = sock.call("rewind_files", run_id=first["run_id"], message_index=0)
        assert reply["type"] == "error" and reply["error"]["code"] == "busy", reply
        sock.until(lambda f: f.get("event") == "run_completed")
    finally:
        sock.close()
    assert_fsck(repo)


def html_until(sock: Any, marker: str) -> list[str]:
    frames: list[str] = []
    while not any(marker in f for f in frames):
        frames.append(str(sock.recv(timeout=20)))
    return frames


def test_html_frames_for_a_chip_and_a_rewind(shared_server: Server) -> None:
    sid = shared_server.new_session()
    lines = "\\n".join(f"line {i}" for i in range(1, 9))
    shared_server.run(sid, f"write a.txt {lines}")
    turn = shared_server.run(sid, f"write a.txt {lines.replace('line 2', 'line 2 by 1')}\n"
                                  "write b.txt bee")
    tid = turn["run_id"]
    shared_server.run(sid, f"write a.txt {lines.replace('line 2', 'line 2 by 3')}")
    with connect(f"{shared_server.ws_url}/ws/sessions/{sid}",
                 additional_headers={"Authorization": f"Bearer {shared_server.token}",
                                     "Origin": shared_server.base_url}, open_timeout=10) as sock:
        # One chip's Revert, one value for `paths` (as a form would send it): it conflicts,
        # and the toast's force button sends that chip's revert again, forced.
        sock.send(json.dumps({"action": "revert_turn", "turn_id": tid, "paths": "a.txt"}))
        toast = html_until(sock, "revert-conflict")[-1]
        force = json.loads(html.unescape(toast.split("data-force='")[1].split("'")[0]))
        assert force == {"action": "revert_turn", "turn_id": tid, "force": True,
                         "paths": ["a.txt"]}
        sock.send(json.dumps({"action": "revert_turn", "turn_id": tid, "paths": "b.txt"}))
        frames = html_until(sock, f'hx-swap-oob="innerHTML:#footer-{tid}"')
        footer = next(f for f in frames if f"#footer-{tid}" in f)
        # Each chip's own button: a.txt's Revert (still revertable), b.txt's Redo.
        assert 'data-path="a.txt" data-act="revert_turn"' in footer
        assert 'data-path="b.txt" data-act="unrevert_turn"' in footer
        assert "1 of 2 reverted" in footer and "chip-off" in footer

        # A files-only rewind swaps the user bubble's menu by id; its undo swaps it back.
        sock.send(json.dumps({"action": "rewind_files", "run_id": tid, "message_index": 0}))
        user_id = turn["messages"][0]["id"]
        frames = html_until(sock, f'id="rewind-{user_id}"')
        menu = next(f for f in frames if f'id="rewind-{user_id}"' in f)
        assert 'hx-swap-oob="true"' in menu and "undo-rewind" in menu
        rewind_id = menu.split('name="turn_id" value="')[1][:32]
        sock.send(json.dumps({"action": "unrevert_turn", "turn_id": rewind_id}))
        frames = html_until(sock, f'id="rewind-{user_id}"')
        menu = next(f for f in frames if f'id="rewind-{user_id}"' in f)
        # The menu again, its choices drawn once a page (_rewind_pop.html), not per message,
        # for the run of the turn it is in.
        assert "undo-rewind" not in menu and '<details class="rewind-menu" data-index="0">' in menu
    status, page = shared_server.api("GET", f"/api/sessions/{sid}")
    assert status == 200 and page["head"]
