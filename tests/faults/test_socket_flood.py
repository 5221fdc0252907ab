"""Issue 21, row 18: a client that sends frames on one socket and never reads them cannot grow
the server. At most BRAID_SOCKET_INFLIGHT actions run per socket; past that the server stops
reading the socket (the client's sends wait on TCP), and the replies waiting for the client
are bounded. Another socket is served meanwhile, and the flooding socket still answers every
request once its client reads."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Server

MB = 1024 * 1024


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_a_socket_flooded_without_reading_stays_bounded(server_factory: Any) -> None:
    srv: Server = server_factory(BRAID_SOCKET_INFLIGHT="4")
    assert srv.proc is not None
    sid = srv.new_session()
    for i in range(3):  # a DAG worth drawing: every reply is a few kB
        srv.run(sid, f"write f{i}.txt {i}")
    flood = srv.socket(sid)
    other = srv.socket(sid)
    assert other.call("get_dag")["type"] == "result"  # warmed up
    before = rss(srv.proc.pid)
    frames = 20_000
    sent = 0

    def send_all() -> None:
        nonlocal sent
        try:
            for n in range(frames):
                flood.ws.send(json.dumps({"action": "get_dag", "request_id": f"f{n}"}))
                sent += 1
        except Exception:  # noqa: BLE001 - the socket is closed under it at the end
            pass

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    sender.join(timeout=20)
    time.sleep(2)  # what the server took in is handled by now
    grown = rss(srv.proc.pid) - before
    print(f"{sent} frames sent unread: the server grew by {grown / MB:.1f} MB")
    # The other socket is served meanwhile.
    started = time.monotonic()
    assert other.call("get_dag")["type"] == "result"
    assert time.monotonic() - started < 5
    assert grown < 25 * MB, f"the server grew by {grown // MB} MB after {sent} frames unread"
    # The flooding socket still works once its client reads: each request it sent is
    # answered, in order of arrival.
    if not sender.is_alive():
        got = [flood.next(timeout=30) for _ in range(sent)]
        ids = [f["request_id"] for f in got if f.get("type") == "result"]
        assert len(ids) == sent and len(set(ids)) == sent
        assert flood.call("list_files")["type"] == "result"
    flood.close()
    # A client that floods and then vanishes without reading: its blocked actions drop
    # their frames, the socket ends, and the server still stops cleanly.
    gone = srv.socket(sid)
    sender = threading.Thread(target=lambda: [gone.ws.send(json.dumps(
        {"action": "get_dag", "request_id": n})) for n in range(5000)], daemon=True)
    sender.start()
    sender.join(timeout=10)
    time.sleep(1)
    gone.ws.socket.shutdown(socket.SHUT_RDWR)
    time.sleep(1)
    assert other.call("get_dag")["type"] == "result"
    other.close()
    srv.stop()
    assert srv.proc.returncode != -signal.SIGKILL, "the server did not stop on SIGTERM"


@pytest.mark.slow
def test_a_slow_reader_gets_every_frame_in_order(server_factory: Any) -> None:
    """Past the bound the senders wait; nothing is dropped or reordered while the client is
    there: the deltas of a long answer, read late, add up to the answer."""
    srv: Server = server_factory()
    sid = srv.new_session()
    ws = srv.socket(sid)
    words = " ".join(f"w{i}" for i in range(600))
    run_id = ws.call("send_message", text=f"say {words}")["data"]["run_id"]
    time.sleep(3)  # not reading: the frames wait, then the turn waits for room
    text = ""
    while True:
        frame = ws.next(timeout=30)
        data = frame.get("data") or {}
        if frame.get("event") == "message_delta" and data.get("run_id") == run_id:
            text += data["delta"]
        if frame.get("event") == "run_completed" and data.get("run_id") == run_id:
            break
    assert text == words
    ws.close()
