"""Issue 21 row 13: credentials inside an endpoint URL (`http://user:PASS@host/v1`,
`?api-key=`) were shown in the run's error on the page, in the API, in the session's git
history and in the log; and a base URL with a query built a wrong request URL (the client
appends `/chat/completions` after the query). Now they are `***` everywhere, and the query
goes with every request as query parameters."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port
from tests.model_replay import ReplayServer, text_stream

PASS, SECRET = "hunter2pass", "sk-topsecret42"


def endpoint_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"endpoints": [
        {"name": "vault", "base_url": base_url, "models": ["m1"]}]}))
    return path


def page(srv: Any, path: str) -> str:
    req = urllib.request.Request(f"{srv.base_url}{path}")
    req.add_header("Cookie", f"braid_token={srv.token}")
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.read().decode()


@pytest.mark.slow
def test_credentials_in_an_endpoint_url_never_show(server_factory: Any, tmp_path: Path
                                                   ) -> None:
    port = free_port()  # nothing listens there
    url = f"http://user:{PASS}@127.0.0.1:{port}/v1?api-key={SECRET}&token={SECRET}x"
    srv = server_factory(BRAID_ENDPOINTS=str(endpoint_file(tmp_path, url)),
                         BRAID_MODEL_TIMEOUT="2", BRAID_MODEL_RETRIES="0")
    sid = srv.new_session()
    ws = srv.socket(sid)
    assert ws.call("update_session", model="m1@vault")["type"] == "result"
    run_id = ws.call("send_message", text="hello")["data"]["run_id"]
    failed = ws.event("run_error", timeout=20)["data"]
    error = failed["error"]
    assert f"127.0.0.1:{port}/v1?api-key=***" in error and "***@" in error, error
    seen = {"event": json.dumps(ws.frames)}
    ws.close()
    seen["api"] = json.dumps(srv.api("GET", f"/api/sessions/{sid}")[1])
    seen["run api"] = json.dumps(srv.api("GET", f"/api/runs/{run_id}?session_id={sid}")[1])
    seen["models api"] = json.dumps(srv.api("GET", "/api/models")[1])
    seen["page"] = page(srv, f"/s/{sid}") + page(srv, f"/s/{sid}/model")
    assert "***" in seen["page"]
    seen["history"] = subprocess.run(
        ["git", "-C", str(srv.session_path(sid)), "log", "-p", "--all"],
        capture_output=True, text=True, check=True).stdout
    assert "api-key=***" in seen["history"]
    srv.stop()  # the log is whole
    seen["log"] = srv.log_path.read_text()
    assert "model error" in seen["log"]
    for where, text in seen.items():
        assert PASS not in text and SECRET not in text, f"a credential in the {where}"


def test_a_query_in_the_base_url_reaches_the_server_as_query(server_factory: Any,
                                                             tmp_path: Path,
                                                             replay: ReplayServer) -> None:
    replay.default = text_stream("Reached you.")
    url = f"{replay.base_url}?api-key={SECRET}"
    srv = server_factory(BRAID_ENDPOINTS=str(endpoint_file(tmp_path, url)))
    sid = srv.new_session()
    ws = srv.socket(sid)
    assert ws.call("update_session", model="m1@vault")["type"] == "result"
    ws.call("send_message", text="hello")
    done = ws.event("run_completed", timeout=20)["data"]
    assert done["messages"][-1]["content"] == "Reached you."
    ws.close()
    assert [r["_path"] for r in replay.requests] == [f"/v1/chat/completions?api-key={SECRET}"]
