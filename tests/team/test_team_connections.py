"""A user's own connections on a team server (two `braid serve` processes on one data dir and
PostgreSQL, two users): what ann adds on one process is hers on the other too, and bob can
neither see it, choose its model, call its MCP server's tools, nor remove it; neither key
nor header comes back in any answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Server, free_port, mcp_http_server
from tests.model_replay import ReplayServer, text_stream

KEY = "sk-team-ann-0123456789"
HEADER = "team-header-secret-42"


@pytest.fixture
def pair(tmp_path: Path, pg_url: str) -> Iterator[tuple[Server, Server]]:
    env = {"BRAID_DATABASE_URL": pg_url, "BRAID_ENDPOINT_HOSTS": "127.0.0.1",
           "BRAID_MCP_HOSTS": "127.0.0.1"}
    a = Server(data_dir=tmp_path / "data", port=free_port(), env=env).start()
    b = Server(data_dir=tmp_path / "data", port=free_port(), env=env)
    try:
        b.start()
        yield a, b
    finally:
        b.stop()
        a.stop()


def add_user(srv: Server, name: str) -> str:
    env = {**os.environ, "BRAID_DATABASE_URL": srv.env["BRAID_DATABASE_URL"]}
    out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", name,
                          "--data-dir", str(srv.data_dir)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def tool_results(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in run["messages"] if m["role"] == "tool"]


@pytest.mark.slow
def test_one_users_connections_are_invisible_and_unusable_to_another(
        pair: tuple[Server, Server], replay: ReplayServer, tmp_path: Path) -> None:
    a, b = pair
    replay.models = ["ann-model"]
    replay.default = text_stream("ann's model answered")
    ann, bob = add_user(a, "ann"), add_user(a, "bob")
    with mcp_http_server(tmp_path / "mcp") as url:
        status, made = a.api("POST", "/api/connections", {
            "kind": "model", "name": "annsrv", "url": replay.base_url, "key": KEY}, token=ann)
        assert status == 201 and made["secret_set"] and KEY not in json.dumps(made), made
        status, made = a.api("POST", "/api/connections", {
            "kind": "mcp", "name": "annweb", "url": url,
            "headers": {"X-Key": HEADER}}, token=ann)
        assert status == 201, made

        # Ann's, on the other process too: listed, her model chosen, a turn on it.
        status, listed = b.api("GET", "/api/connections", token=ann)
        assert status == 200 and [c["name"] for c in listed["connections"]] == [
            "annsrv", "annweb"]
        assert KEY not in json.dumps(listed) and HEADER not in json.dumps(listed)
        status, models = b.api("GET", "/api/models", token=ann)
        assert "ann-model@annsrv" in {m.get("ref") for m in models["models"]}
        status, mine = b.api("POST", "/api/sessions", {}, token=ann)
        sid = mine["session_id"]
        status, _ = b.api("PATCH", f"/api/sessions/{sid}", {"model": "ann-model@annsrv"},
                          token=ann)
        assert status == 200
        status, run = b.api("POST", f"/api/sessions/{sid}/runs",
                            {"input": "hi"}, token=ann)
        assert status == 200 and run["status"] == "COMPLETED", run
        assert run["endpoint"] == "annsrv"
        assert replay.requests[-1]["_headers"]["authorization"] == f"Bearer {KEY}"
        status, _ = a.api("PATCH", f"/api/sessions/{sid}", {"model": None}, token=ann)
        assert status == 200  # the demo model again: it makes the call
        status, run = a.api("POST", f"/api/sessions/{sid}/runs",
                            {"input": "call mcp__annweb__whoami {}"}, token=ann)
        [result] = tool_results(run)
        assert not result.get("is_error"), result

        # Bob sees none of it, on either process, and can use none of it.
        for srv in (a, b):
            status, listed = srv.api("GET", "/api/connections", token=bob)
            assert status == 200 and listed == {"connections": []}
            status, models = srv.api("GET", "/api/models", token=bob)
            assert not any(m["endpoint"] == "annsrv" for m in models["models"])
        status, his = a.api("POST", "/api/sessions", {}, token=bob)
        hid = his["session_id"]
        status, refused = b.api("PATCH", f"/api/sessions/{hid}",
                                {"model": "ann-model@annsrv"}, token=bob)
        assert status == 400 and refused["error"]["code"] == "bad_request"
        status, tools = b.api("GET", f"/api/sessions/{hid}/tools", token=bob)
        assert not any(t["name"].startswith("mcp__annweb__") for t in tools["tools"])
        asked = len(replay.requests)
        status, run = a.api("POST", f"/api/sessions/{hid}/runs",
                            {"input": "call mcp__annweb__whoami {}"}, token=bob)
        [result] = tool_results(run)
        assert result["is_error"] and "unknown tool" in result["content"], result
        assert len(replay.requests) == asked  # bob's turns never reach ann's endpoint
        status, gone = b.api("DELETE", "/api/connections/model/annsrv", token=bob)
        assert status == 404 and gone["error"]["code"] == "not_found"
        status, listed = a.api("GET", "/api/connections", token=ann)
        assert len(listed["connections"]) == 2

    for srv in (a, b):
        assert srv.log_path is not None
        log = srv.log_path.read_text()
        assert KEY not in log and HEADER not in log and "Traceback" not in log
