"""kill -9 during a turn, then a restart: the killed turn's messages are found by search
(start-up recovery commits the run INTERRUPTED and adds its rows, store/search.py), and a
turn after it is found too."""

from __future__ import annotations

import signal
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from conftest import Server, free_port


def found(srv: Server, q: str) -> list[tuple[int, str]]:
    status, body = srv.api("GET", "/api/search?" + urllib.parse.urlencode({"q": q}))
    assert status == 200, body
    return [(h["message_index"], h["role"]) for h in body["results"]]


@pytest.mark.parametrize("point", ["turn.model", "turn.finish"])
def test_a_killed_turn_s_messages_are_found_after_restart(tmp_path: Path, point: str) -> None:
    data_dir = tmp_path / "data"
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        sid = srv.new_session()
        srv.run(sid, "say before the kill")
    finally:
        srv.stop()
    armed = Server(data_dir=data_dir, port=free_port(), env={"BRAID_CRASH_AT": point}).start()
    with pytest.raises((OSError, urllib.error.URLError)):
        armed.api("POST", f"/api/sessions/{sid}/runs", {"input": "say the ocelot was here"})
    assert armed.proc is not None
    assert armed.proc.wait(timeout=30) == -signal.SIGKILL, f"{point} was never reached"
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        hits = found(srv, "ocelot")
        assert hits == [(0, "user")]  # the question (the answer died unwritten with it)
        run = srv.run(sid, "say after the kill ocelot")
        assert run["status"] == "COMPLETED"
        assert len(found(srv, "ocelot")) == len(hits) + 2
    finally:
        srv.stop()
