"""Ten tabs on one session cost the server what one tab costs: the core publishes complete
payloads and each event's view is read once (web/event_views.py), whatever the number of
sockets that render it.

The server runs in this process (real uvicorn, real sockets) so the test can count the calls
that reach the core's read functions: every `SessionHandle.call` (all git work) and every
index query. One turn is run with one tab open and again with ten; the counts must match."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TOKEN, free_port

INDEX_READS = ("list_runs", "list_sessions", "runs_with_status")


class Live:
    def __init__(self, braid: Any, port: int) -> None:
        self.braid = braid
        self.base_url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"
        self.reads: Counter[str] = Counter()

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as res:
            return json.loads(res.read() or b"null")

    def tab(self, session_id: str) -> Any:
        from websockets.sync.client import connect

        ws = connect(f"{self.ws_url}/ws/sessions/{session_id}?format=html",
                     additional_headers={"Authorization": f"Bearer {TOKEN}"},
                     open_timeout=10, legacy=True)
        # A refused frame answers with a toast: the socket is subscribed and reading.
        ws.send(json.dumps({"action": "no_such_action"}))
        while "toast" not in ws.recv(timeout=15):
            pass
        return ws


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    import uvicorn

    from server.base.settings import Settings
    from server.store.session_store import SessionHandle
    from server.web.app import create_app

    port = free_port()
    app = create_app(Settings(data_dir=tmp_path / "data", token=TOKEN, port=port))
    braid = app.state.braid
    out = Live(braid, port)

    original_call = SessionHandle.call

    async def counted_call(self: Any, fn: Any) -> Any:
        out.reads["git"] += 1
        return await original_call(self, fn)

    monkeypatch.setattr(SessionHandle, "call", counted_call)
    for name in INDEX_READS:
        original = getattr(braid.index, name)

        async def counted(*args: Any, _name: str = name, _fn: Any = original,
                          **kwargs: Any) -> Any:
            out.reads[f"index.{_name}"] += 1
            return await _fn(*args, **kwargs)

        monkeypatch.setattr(braid.index, name, counted)

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    yield out
    server.should_exit = True
    thread.join(20)


def _turn_with_tabs(live: Live, tabs: int) -> tuple[Counter[str], int]:
    sid = live.api("POST", "/api/sessions", {})["session_id"]
    live.api("POST", f"/api/sessions/{sid}/runs", {"input": "write a.txt one"})
    sockets = [live.tab(sid) for _ in range(tabs)]
    try:
        live.reads.clear()
        run = live.api("POST", f"/api/sessions/{sid}/runs",
                       {"input": "write b.txt two\nsay done"})
        frames = 0
        for ws in sockets:
            # Every tab draws the finished turn (with its chips) and then the new graph.
            seen_turn = seen_dag = False
            while not (seen_turn and seen_dag):
                html = ws.recv(timeout=20)
                frames += 1
                if f'id="turn-{run["run_id"]}"' in html and 'data-status="COMPLETED"' in html:
                    assert 'data-path="b.txt"' in html, "the chips came with the bubble"
                    seen_turn = True
                seen_dag = seen_dag or 'id="dag"' in html
        return Counter(live.reads), frames
    finally:
        for ws in sockets:
            ws.close()


def test_ten_tabs_cost_the_reads_of_one(live: Live) -> None:
    one, frames_one = _turn_with_tabs(live, 1)
    ten, frames_ten = _turn_with_tabs(live, 10)
    print(f"\nreads for one turn, 1 tab ({frames_one} frames): {dict(one)}"
          f"\nreads for one turn, 10 tabs ({frames_ten} frames): {dict(ten)}")
    assert frames_ten >= 10 * 2
    assert sum(one.values()) > 0
    assert ten == one
