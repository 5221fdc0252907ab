"""The session WebSocket (DESIGN §5) against a real server: error frames and their codes, the
socket surviving them, events to every connection, auth and Origin, and the HTML format."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conftest import Server, WsClient, assert_fsck, git


@pytest.fixture
def session_id(shared_server: Server) -> str:
    return shared_server.new_session()


@pytest.fixture
def ws(shared_server: Server, session_id: str) -> Any:
    client = shared_server.socket(session_id)
    yield client
    client.close()


def assert_error(frame: dict[str, Any], code: str, request_id: Any = None,
                 action: Any = None) -> None:
    assert frame["type"] == "error", frame
    assert frame["error"]["code"] == code, frame
    assert frame["error"]["message"]
    assert frame["request_id"] == request_id
    assert frame["action"] == action


def assert_still_works(ws: WsClient) -> None:
    reply = ws.call("get_dag")
    assert reply["type"] == "result" and reply["action"] == "get_dag", reply
    assert reply["data"]["nodes"] and reply["data"]["branches"][0]["name"] == "main"


def test_malformed_frame(ws: WsClient) -> None:
    ws.send(raw="{not json")
    assert_error(ws.next(), "bad_request")
    assert_still_works(ws)


def test_non_object_frame(ws: WsClient) -> None:
    for raw in ('[1, 2]', '"send_message"', "42", "null"):
        ws.send(raw=raw)
        assert_error(ws.next(), "bad_request")
    ws.send(raw=json.dumps({"request_id": "x"}))  # an object without an action
    assert_error(ws.next(), "bad_request", "x")
    assert_still_works(ws)


def test_unknown_action(ws: WsClient) -> None:
    request_id = ws.send("frobnicate")
    frame = ws.next()
    assert_error(frame, "bad_request", request_id, "frobnicate")
    assert "send_message" in frame["error"]["details"]["actions"]
    assert_still_works(ws)


def test_missing_and_invalid_parameters(ws: WsClient) -> None:
    request_id = ws.send("send_message")
    assert_error(ws.reply(request_id), "bad_request", request_id, "send_message")
    for params in ({"text": ""}, {"text": 5}, {"text": ["a"]}):
        request_id = ws.send("send_message", **params)
        assert_error(ws.reply(request_id), "bad_request", request_id, "send_message")
    request_id = ws.send("cancel_run", run_id=5)
    assert_error(ws.reply(request_id), "bad_request", request_id, "cancel_run")
    request_id = ws.send("checkout")
    assert_error(ws.reply(request_id), "bad_request", request_id, "checkout")
    request_id = ws.send("checkout", ref="no-such-branch")
    assert_error(ws.reply(request_id), "not_found", request_id, "checkout")
    request_id = ws.send("cancel_run")
    assert_error(ws.reply(request_id), "not_found", request_id, "cancel_run")
    assert_still_works(ws)


def test_send_message_result_and_events(ws: WsClient, shared_server: Server,
                                        session_id: str) -> None:
    # htmx's ws extension adds HEADERS to every frame: it is ignored.
    reply = ws.call("send_message", text="write notes/a.txt hello", HEADERS={"HX-Request": "1"})
    assert reply["type"] == "result", reply
    run_id = reply["data"]["run_id"]
    names = []
    while True:
        frame = ws.until(lambda f: f["type"] == "event")
        assert frame["data"]["session_id"] == session_id
        names.append(frame["event"])
        if frame["event"] == "run_completed":
            break
    assert names[0] == "run_started"
    assert {"tool_call", "tool_result", "checkpoint", "message_delta"} <= set(names)
    assert frame["data"]["run_id"] == run_id and frame["data"]["status"] == "COMPLETED"
    path = shared_server.session_path(session_id)
    assert (path / "workdir/notes/a.txt").read_text() == "hello\n"
    assert_fsck(path)
    reply = ws.call("checkout", ref="main")
    assert reply["data"]["branch"] == "main"
    assert reply["data"]["head"] == git(path, "rev-parse", "HEAD").strip()


def test_unknown_session_gets_not_found_then_4404(shared_server: Server) -> None:
    for bad in ("0" * 32, "not-a-session-id"):
        client = shared_server.socket(bad)
        assert_error(client.next(), "not_found")
        with pytest.raises(ConnectionClosed) as closed:
            client.next()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


def test_another_users_session_is_not_found(shared_server: Server, session_id: str,
                                            other_token: str) -> None:
    client = shared_server.socket(session_id, token=other_token)
    assert_error(client.next(), "not_found")
    with pytest.raises(ConnectionClosed) as closed:
        client.next()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    # Bob's own sessions work on the socket.
    status, body = shared_server.api("POST", "/api/sessions", {}, token=other_token)
    assert status == 201
    own = shared_server.socket(body["session_id"], token=other_token)
    assert_still_works(own)
    own.close()


def test_two_sockets_both_receive_a_runs_events(shared_server: Server, session_id: str) -> None:
    first = shared_server.socket(session_id)
    second = shared_server.socket(session_id)
    try:
        assert_still_works(second)  # one round trip: the second socket is subscribed
        run_id = first.call("send_message", text="slow 20\nsay one two three")["data"]["run_id"]
        for client in (first, second):
            started = client.event("run_started")
            assert started["data"]["run_id"] == run_id
            delta = client.event("message_delta")
            assert delta["data"]["run_id"] == run_id
            done = client.event("run_completed")
            assert done["data"]["run_id"] == run_id
            assert done["data"]["messages"][-1]["content"] == "one two three"
        # Only the sender gets the send_message result frame.
        assert not any(f.get("action") == "send_message" for f in second.frames)
    finally:
        first.close()
        second.close()


def test_busy_when_a_run_is_going_on(ws: WsClient) -> None:
    ws.call("send_message", text="slow 100\nsay a b c d e f")
    reply = ws.call("send_message", text="say second")
    assert_error(reply, "busy", reply["request_id"], "send_message")
    ws.event("run_completed")
    assert ws.call("send_message", text="say third")["type"] == "result"
    ws.event("run_completed")


def test_cancel_run_over_the_socket(ws: WsClient) -> None:
    run_id = ws.call("send_message", text="slow 200\nsay a b c d e f g h")["data"]["run_id"]
    ws.event("message_delta")
    reply = ws.call("cancel_run", run_id=run_id)
    assert reply["data"] == {"run_id": run_id, "status": "CANCELLED"}
    # The event may come before the result: the run has ended by the time the result is sent.
    cancelled = [f for f in ws.frames if f.get("event") == "run_cancelled"] \
        or [ws.event("run_cancelled")]
    assert cancelled[0]["data"]["status"] == "CANCELLED"


def refused(shared_server: Server, session_id: str, headers: dict[str, str]) -> int:
    with pytest.raises(InvalidStatus) as err:
        connect(f"{shared_server.ws_url}/ws/sessions/{session_id}?format=json",
                additional_headers=headers, open_timeout=10, legacy=True)
    return err.value.response.status_code


def test_foreign_origin_is_refused(shared_server: Server, session_id: str) -> None:
    auth = {"Authorization": f"Bearer {shared_server.token}"}
    status = refused(shared_server, session_id, {**auth, "Origin": "http://evil.example"})
    assert status == 403
    # A page of another port on the same host is another origin too.
    other = f"http://127.0.0.1:{shared_server.port + 1}"
    assert refused(shared_server, session_id, {**auth, "Origin": other}) == 403
    # The page's own origin is accepted.
    own = shared_server.socket(session_id, Origin=shared_server.base_url)
    assert_still_works(own)
    own.close()


def test_no_or_bad_token_is_refused(shared_server: Server, session_id: str) -> None:
    assert refused(shared_server, session_id, {}) == 403
    assert refused(shared_server, session_id, {"Authorization": "Bearer wrong"}) == 403
    assert refused(shared_server, session_id, {"Cookie": "braid_token=wrong"}) == 403
    for path in ("/api/sessions", f"/api/sessions/{session_id}"):
        try:
            urllib.request.urlopen(f"{shared_server.base_url}{path}", timeout=10)
            raise AssertionError("no 401")
        except urllib.error.HTTPError as e:
            assert e.code == 401
            assert json.loads(e.read())["error"]["code"] == "unauthorized"
    # The login cookie works on the socket as it does for the page.
    client = WsClient(connect(
        f"{shared_server.ws_url}/ws/sessions/{session_id}?format=json",
        additional_headers={"Cookie": f"braid_token={shared_server.token}"},
        open_timeout=10, legacy=True))
    assert_still_works(client)
    client.close()


def html_socket(shared_server: Server, session_id: str) -> Any:
    return connect(f"{shared_server.ws_url}/ws/sessions/{session_id}",
                   additional_headers={"Authorization": f"Bearer {shared_server.token}",
                                       "Origin": shared_server.base_url},
                   open_timeout=10, legacy=True)


def test_html_frames_carry_the_ids_htmx_swaps(shared_server: Server, session_id: str) -> None:
    sock = html_socket(shared_server, session_id)
    try:
        sock.send(json.dumps({"action": "send_message", "text": "write notes/a.txt hello",
                              "HEADERS": {"HX-Request": "true"}}))
        frames: list[str] = []
        while not any('data-status="COMPLETED"' in f for f in frames):
            frames.append(str(sock.recv(timeout=20)))
        started = next(f for f in frames if 'id="transcript"' in f)
        assert 'hx-swap-oob="beforeend"' in started
        run_id = re.search(r'data-run-id="([0-9a-f]{32})"', started).group(1)  # type: ignore
        assert f'id="turn-{run_id}"' in started and f'id="live-{run_id}"' in started
        assert 'id="stop-btn"' in started and 'id="run-state"' in started
        assert 'id="session-title"' in started
        # A streamed chunk is data, not HTML: text the page appends to the live block.
        deltas = [json.loads(f) for f in frames if f.startswith("{")]
        assert deltas and all(d["frame"] == "append" and d["id"] == f"live-{run_id}"
                              for d in deltas)
        assert "".join(d["text"] for d in deltas).strip()
        card = next(f for f in frames if f'id="tool-{run_id}-' in f)
        assert f'id="parts-{run_id}"' in card and "notes/a.txt" in card
        assert any(f.strip().startswith('<span class="tool-status ok" id="tool-status-')
                   for f in frames)
        assert any(f'id="tool-output-{run_id}-' in f for f in frames)
        final = frames[-1]
        assert f'id="turn-{run_id}"' in final and "done: wrote notes/a.txt" in final
        assert 'id="run-state"' in final and 'id="stop-btn"' not in final
        # An error in the HTML format is a toast.
        sock.send(json.dumps({"action": "frobnicate"}))
        toast = ""
        while 'id="toasts"' not in toast:  # after any frames the finished run still sends
            toast = str(sock.recv(timeout=10))
        assert toast.strip().startswith('<div id="toasts" hx-swap-oob="beforeend">')
        assert "frobnicate" in toast and 'role="alert"' in toast
    finally:
        sock.close()


def test_html_unknown_session_is_a_toast_then_4404(shared_server: Server) -> None:
    sock = html_socket(shared_server, "0" * 32)
    frame = str(sock.recv(timeout=10))
    assert 'id="toasts"' in frame and "no session" in frame
    with pytest.raises(ConnectionClosed) as closed:
        sock.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


def test_cross_site_form_posts_are_refused(shared_server: Server) -> None:
    cookie = {"Cookie": f"braid_token={shared_server.token}",
              "Content-Type": "application/x-www-form-urlencoded"}
    before = shared_server.api("GET", "/api/sessions")[1]["sessions"]

    def post(path: str, origin: str, data: bytes = b"") -> int:
        req = urllib.request.Request(f"{shared_server.base_url}{path}", data=data,
                                     method="POST", headers={**cookie, "Origin": origin})
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=10) as res:
                return int(res.status)
        except urllib.error.HTTPError as e:
            return e.code

    for origin in ("http://evil.example", "null"):
        assert post("/sessions", origin) == 403
        assert post("/login", origin, f"token={shared_server.token}".encode()) == 403
    assert shared_server.api("GET", "/api/sessions")[1]["sessions"] == before
    assert post("/sessions", shared_server.base_url) == 303


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_checkout_and_get_dag(ws: WsClient, shared_server: Server, session_id: str) -> None:
    path = shared_server.session_path(session_id)
    ws.call("send_message", text="write a.txt one")
    ws.event("run_completed")
    git(path, "branch", "side")  # a second branch, made with git as a user could
    side_tip = git(path, "rev-parse", "side").strip()
    ws.call("send_message", text="write a.txt two")
    ws.event("run_completed")
    (path / "workdir/b.txt").write_text("unsaved\n")

    for bad in ("", "-x", "a..b", 5):
        assert_error(ws.call("checkout", ref=bad), "bad_request", ws.frames[-1]["request_id"],
                     "checkout")
    reply = ws.call("checkout", ref="side")
    assert reply["data"] == {"branch": "side", "head": side_tip}
    assert (path / "workdir/a.txt").read_text() == "one\n"
    assert not (path / "workdir/b.txt").exists()
    # The unsaved edit was committed on main first, so nothing is lost.
    assert git(path, "show", "main:workdir/b.txt") == "unsaved\n"
    assert "user-edit" in git(path, "log", "-1", "--format=%B", "main")
    assert git(path, "status", "--porcelain") == ""

    run_id = ws.call("send_message", text="write c.txt side")["data"]["run_id"]
    ws.event("run_completed")
    assert git(path, "show", "side:workdir/c.txt") == "side\n"
    assert git(path, "log", "-1", "--format=%(trailers:key=Braid-Run,valueonly)",
               "side").strip() == run_id
    dag = ws.call("get_dag")["data"]
    assert {b["name"] for b in dag["branches"]} == {"main", "side"}
    nodes = {n["id"]: n for n in dag["nodes"]}
    assert git(path, "rev-parse", "main").strip() in nodes
    tip = nodes[git(path, "rev-parse", "side").strip()]
    assert tip["kind"] == "turn" and tip["run_id"] == run_id and tip["branch"] == "side"
    assert tip["parent_ids"] and all(p in nodes for p in tip["parent_ids"])

    reply = ws.call("checkout", ref="main")
    assert reply["data"]["branch"] == "main"
    assert (path / "workdir/a.txt").read_text() == "two\n"
    assert (path / "workdir/b.txt").read_text() == "unsaved\n"
    assert not (path / "workdir/c.txt").exists()
    assert_fsck(path)


def test_a_socket_let_go_for_falling_behind_is_closed_with_a_code_the_page_reconnects_on(
) -> None:
    """The page's socket is htmx-ext-ws's: it reconnects only on the close codes it lists.
    A socket the bus let go must be closed with one of them, or the page never catches up."""
    import re
    from pathlib import Path

    from server.web.ws import BEHIND_CODE

    source = (Path(__file__).resolve().parents[2] / "node_modules" / "htmx-ext-ws" / "dist"
              / "ws.js").read_text()
    listed = re.search(r"\[([0-9, ]+)\]\.indexOf\(e\.code\)", source)
    assert listed is not None, "htmx-ext-ws's reconnect codes not found"
    assert BEHIND_CODE in {int(c) for c in listed.group(1).split(",")}
