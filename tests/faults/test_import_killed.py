"""kill -9 during an import: the half-made session folder is never listed, and the next
import after the restart removes it; the source folder is untouched."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path
from typing import Any

from conftest import Server


def test_an_import_killed_midway_leaves_no_session(server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    src = roots / "big"
    for i in range(20_000):
        d = src / f"d{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i % 100}.txt").write_text(f"{i}\n")
    srv: Server = server_factory(BRAID_IMPORT_ROOTS=str(roots))
    sessions = srv.data_dir / "sessions"
    before = {p.name for p in sessions.iterdir()}
    def post() -> None:
        try:
            srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
        except OSError:  # the server dies under it: that is the point
            pass

    threading.Thread(target=post, daemon=True).start()
    deadline = time.monotonic() + 30
    while not ({p.name for p in sessions.iterdir()} - before):
        assert time.monotonic() < deadline, "the import never started"
        time.sleep(0.005)
    srv.stop(signal.SIGKILL)
    half = {p.name for p in sessions.iterdir()} - before
    assert half and all(not (sessions / h / "session.json").exists() for h in half)

    again = dataclasses.replace(srv, proc=None)
    again.start()
    try:
        status, listed = again.api("GET", "/api/sessions")
        assert status == 200 and not {s["session_id"] for s in listed["sessions"]} & half
        small = roots / "small"
        small.mkdir()
        (small / "a.txt").write_text("a\n")
        status, created = again.api("POST", "/api/sessions", {"source": {"path": str(small)}})
        assert status == 201, created
        assert {p.name for p in sessions.iterdir()} - before == {created["session_id"]}
    finally:
        again.stop()
    assert len(list(src.rglob("*.txt"))) == 20_000
