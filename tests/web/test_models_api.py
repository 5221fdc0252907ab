"""Several endpoints (BRAID_ENDPOINTS), `GET /api/models`, a session's model choice kept in
session.json across restarts and on each run record, and where its requests go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, git
from tests.model_replay import ReplayServer, text_stream


def endpoints_file(tmp_path: Path, replay: ReplayServer, kind: str = "toml") -> Path:
    if kind == "toml":
        path = tmp_path / "endpoints.toml"
        path.write_text(f'[[endpoints]]\nname = "local"\nbase_url = "{replay.base_url}"\n'
                        'api_key_env = "LOCAL_TEST_KEY"\n')
    else:
        path = tmp_path / "endpoints.json"
        path.write_text(json.dumps({"endpoints": [
            {"name": "local", "base_url": replay.base_url, "api_key_env": "LOCAL_TEST_KEY"}]}))
    return path


def test_models_lists_demo_and_every_endpoints_models(server_factory: Any, tmp_path: Path,
                                                      replay: ReplayServer) -> None:
    replay.models = ["smollm2", "qwen2.5:0.5b"]
    srv = server_factory(BRAID_ENDPOINTS=str(endpoints_file(tmp_path, replay, "json")))
    status, body = srv.api("GET", "/api/models")
    assert status == 200
    pairs = [(m["id"], m["endpoint"]) for m in body["models"]]
    assert pairs == [("demo", "demo"), ("smollm2", "local"), ("qwen2.5:0.5b", "local")]
    assert body["default"] == "demo"
    status, _ = srv.api("GET", "/api/models", token="wrong-token")
    assert status == 401


@pytest.mark.slow
def test_a_down_endpoint_is_listed_with_its_error(server_factory: Any, tmp_path: Path,
                                                  replay: ReplayServer) -> None:
    path = endpoints_file(tmp_path, replay)
    replay.stop()
    srv = server_factory(BRAID_ENDPOINTS=str(path))
    status, body = srv.api("GET", "/api/models")
    assert status == 200
    down = [m for m in body["models"] if m["endpoint"] == "local"]
    assert down and down[0]["id"] is None and replay.base_url in down[0]["error"]


@pytest.mark.slow
def test_the_sessions_model_is_kept_and_used(server_factory: Any, tmp_path: Path,
                                             replay: ReplayServer) -> None:
    env = {"BRAID_ENDPOINTS": str(endpoints_file(tmp_path, replay)),
           "LOCAL_TEST_KEY": "sk-local-123"}
    srv = server_factory(**env)
    sid = srv.new_session()
    ws = srv.socket(sid)
    bad = ws.call("update_session", model="smollm2@nowhere")
    assert bad["type"] == "error" and bad["error"]["code"] == "bad_request"
    done = ws.call("update_session", model="smollm2@local")
    assert done["type"] == "result" and done["data"]["model"] == "smollm2@local"
    ws.close()
    meta = json.loads(git(srv.session_path(sid), "show", "HEAD:session.json"))
    assert meta["model"] == "smollm2@local"
    replay.push(text_stream("Hello from the local server.", usage=True))
    run = srv.run(sid, "hello")
    assert run["status"] == "COMPLETED", run.get("error")
    assert run["messages"][-1]["content"] == "Hello from the local server."
    assert run["model"] == "smollm2" and run["endpoint"] == "local"
    assert run["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    sent = replay.requests[-1]
    assert sent["model"] == "smollm2"
    assert sent["_headers"]["authorization"] == "Bearer sk-local-123"  # from api_key_env
    srv.stop()
    again = server_factory(data_dir=srv.data_dir, **env)
    status, info = again.api("GET", f"/api/sessions/{sid}")
    assert status == 200 and info["model"] == "smollm2@local"
    # Back to the default model: the next turn is the demo's.
    ws = again.socket(sid)
    assert ws.call("update_session", model=None)["data"]["model_in_use"] == "demo"
    ws.close()
    assert again.run(sid, "say demo again")["messages"][-1]["content"] == "demo again"
    assert_fsck(again.session_path(sid))
