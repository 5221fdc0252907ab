"""The queue over a real server, through the socket and its HTTP twins: a message sent with
`queue` during a run is queued (`queued_id`, `queue_changed` on every socket of the
session), runs in order after it, can be edited and removed while it waits; errors are
`busy`, `bad_request` and `not_found` (another user's session too), the socket stays open."""

from __future__ import annotations

from typing import Any

from conftest import Server, WsClient, assert_fsck, git

SLOW = "slow 100\nsay " + " ".join(f"w{i}" for i in range(30))



def queue_texts(frame: dict[str, Any]) -> list[str]:
    """The texts of a `queue_changed` (the one it changed) or a `list_queue` result."""
    return [q["text"] for q in frame["data"]["queued"]]


def test_over_the_socket(shared_server: Server, other_token: str) -> None:
    srv = shared_server
    sid = srv.new_session()
    ws, tab = srv.socket(sid), srv.socket(sid)
    try:
        first = ws.call("send_message", text=SLOW)["data"]["run_id"]
        busy = ws.call("send_message", text="say no queue")
        assert busy["type"] == "error" and busy["error"]["code"] == "busy"
        one = ws.call("send_message", text="say one", queue=True)
        assert one["type"] == "result" and set(one["data"]) == {"queued_id"}, one
        two = ws.call("send_message", text="say two", queue=True)["data"]["queued_id"]
        three = ws.call("send_message", text="say three", queue=True)["data"]["queued_id"]
        # Every tab hears of it.
        added = tab.until(lambda f: f.get("event") == "queue_changed"
                          and len(f["data"]["ids"]) == 3)
        # It carries what changed (the message added), not the whole queue.
        assert added["data"]["change"] == "added" and queue_texts(added) == ["say three"]
        listed = ws.call("list_queue")["data"]["queued"]
        assert [q["queued_id"] for q in listed] == [one["data"]["queued_id"], two, three]
        edited = ws.call("update_queued", queued_id=two, text="say TWO")
        assert edited["data"] == {"queued_id": two}
        removed = ws.call("cancel_queued", queued_id=three)
        assert removed["data"] == {"queued_id": three}
        last = tab.until(lambda f: f.get("event") == "queue_changed"
                         and f["data"]["change"] == "removed" and f["data"]["ids"] == [
                             one["data"]["queued_id"], two])
        assert last["data"]["queued_id"] == three and last["data"]["queued"] == []
        assert queue_texts(ws.call("list_queue")) == ["say one", "say TWO"]
        assert last["data"]["session_id"] == sid
        for params in ({"queued_id": three}, {"queued_id": "0" * 32}, {"queued_id": "x"}):
            gone = ws.call("cancel_queued", **params)
            assert gone["error"]["code"] == "not_found", gone
        bad = ws.call("update_queued", queued_id=two, text=["x"])
        assert bad["error"]["code"] == "bad_request"
        bad = ws.call("send_message", text="say x", queue="perhaps")
        assert bad["error"]["code"] == "bad_request"
        # Another user: the session's queue is not there at all.
        status, body = srv.api("GET", f"/api/sessions/{sid}/queue", token=other_token)
        assert status == 404 and body["error"]["code"] == "not_found"
        status, body = srv.api("DELETE", f"/api/sessions/{sid}/queue/{two}", token=other_token)
        assert status == 404
        # The queued messages run after the first, in order, each with its run events.
        ended = [f["data"]["run_id"] for f in _ends(ws, 3)]
        assert ended == [first, one["data"]["queued_id"], two]
        runs = srv.settled_runs(sid, 3)
        assert [r["run_id"] for r in runs] == ended
        assert ws.call("list_queue")["data"] == {"queued": []}
        started = ws.call("update_queued", queued_id=two, text="too late")
        assert started["error"]["code"] == "not_found"
        log = git(srv.session_path(sid), "log", "--reverse", "--format=%s").splitlines()
        assert log[-2:] == ["Turn: say one", "Turn: say TWO"]
    finally:
        ws.close()
        tab.close()
    assert_fsck(srv.session_path(sid))


def _ends(ws: WsClient, count: int) -> list[dict[str, Any]]:
    """The next `count` run_started-then-ended runs' end frames (frames already read too)."""
    ends: list[dict[str, Any]] = [f for f in ws.frames if f.get("event") == "run_completed"]
    while len(ends) < count:
        ends.append(ws.event("run_completed", timeout=60))
    starts = [f["data"]["run_id"] for f in ws.frames if f.get("event") == "run_started"]
    assert starts[:count] == [f["data"]["run_id"] for f in ends[:count]]
    return ends[:count]


def test_over_http(shared_server: Server, other_token: str) -> None:
    srv = shared_server
    sid = srv.new_session()
    ws = srv.socket(sid)
    try:
        ws.call("send_message", text=SLOW)
        status, body = srv.api("POST", f"/api/sessions/{sid}/runs", {"input": "say busy"})
        assert status == 409 and body["error"]["code"] == "busy"
        status, one = srv.api("POST", f"/api/sessions/{sid}/runs",
                              {"input": "say one", "queue": True})
        assert status == 200 and set(one) == {"queued_id"}, one
        _, two = srv.api("POST", f"/api/sessions/{sid}/runs", {"input": "say two", "queue": True})
        status, listed = srv.api("GET", f"/api/sessions/{sid}/queue")
        assert status == 200
        assert [q["text"] for q in listed["queued"]] == ["say one", "say two"]
        path = f"/api/sessions/{sid}/queue/{one['queued_id']}"
        assert srv.api("PATCH", path, {"text": "say ONE"}) == (200, one)
        status, body = srv.api("PATCH", path, {"text": ""})
        assert status == 400 and body["error"]["code"] == "bad_request"
        status, body = srv.api("PATCH", path, {"text": "theirs"}, token=other_token)
        assert status == 404
        assert srv.api("DELETE", f"/api/sessions/{sid}/queue/{two['queued_id']}") == (200, two)
        status, body = srv.api("DELETE", f"/api/sessions/{sid}/queue/{two['queued_id']}")
        assert status == 404 and body["error"]["code"] == "not_found"
        runs = srv.settled_runs(sid, 2)
        assert runs[1]["run_id"] == one["queued_id"] and runs[1]["status"] == "COMPLETED"
        status, run = srv.api("GET", f"/api/runs/{one['queued_id']}?session_id={sid}")
        assert [m["content"] for m in run["messages"] if m["role"] == "user"] == ["say ONE"]
        # `queue` on a free branch: it just runs, and HTTP waits for its end as ever.
        status, done = srv.api("POST", f"/api/sessions/{sid}/runs",
                               {"input": "say free", "queue": True})
        assert status == 200 and done["status"] == "COMPLETED", done
        assert ws.call("get_dag")["type"] == "result"  # the socket stayed open
    finally:
        ws.close()


def test_the_page_frames_escape_queued_text(shared_server: Server) -> None:
    """The queue's HTML (page and `queue_changed` frames) shows the user's text, never as
    markup."""
    from websockets.sync.client import connect

    srv = shared_server
    sid = srv.new_session()
    ws = srv.socket(sid)
    page = connect(f"{srv.ws_url}/ws/sessions/{sid}?format=html",
                   additional_headers={"Authorization": f"Bearer {srv.token}"},
                   open_timeout=10, legacy=True)
    try:
        ws.call("send_message", text=SLOW)
        hostile = "<img src=x onerror=alert(1)> & <b>bold</b>"
        queued_id = ws.call("send_message", text=hostile, queue=True)["data"]["queued_id"]
        html = ""
        while 'id="queue"' not in html:
            html += page.recv(timeout=20)
        assert f'id="queued-{queued_id}"' in html
        assert "<img" not in html and "<b>" not in html
        assert "&lt;img src=x onerror=alert(1)&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in html
        status, text = srv.page(f"/s/{sid}")
        assert status == 200 and f'id="queued-{queued_id}"' in text and "<img src=x" not in text
        ws.call("cancel_queued", queued_id=queued_id)
        ws.call("cancel_run")
    finally:
        page.close()
        ws.close()
