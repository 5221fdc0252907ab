"""A model server that is down, hung, or answers 401/404/500, seen through a real Braid
server and its socket: an ERROR run whose message names the URL and the cause, within the
configured timeout; the socket stays open, the repository passes `git fsck`, the error is in
the server's log, and the run resumes once the server answers again."""

from __future__ import annotations

import time
from typing import Any

import pytest

from conftest import assert_fsck, free_port
from tests.model_replay import ReplayServer, error, text_stream

TIMEOUT = 1.5


def start(server_factory: Any, base_url: str) -> Any:
    return server_factory(BRAID_MODEL="smollm2", OPENAI_BASE_URL=base_url,
                          BRAID_MODEL_TIMEOUT=str(TIMEOUT), BRAID_MODEL_RETRIES="0")


def fail_then_resume(srv: Any, replay: ReplayServer, words: list[str]) -> None:
    sid = srv.new_session()
    ws = srv.socket(sid)
    began = time.monotonic()
    reply = ws.call("send_message", text="hello there")
    assert reply["type"] == "result", reply
    run_id = reply["data"]["run_id"]
    failed = ws.event("run_error", timeout=TIMEOUT + 10)["data"]
    took = time.monotonic() - began
    assert failed["run_id"] == run_id and failed["status"] == "ERROR"
    assert replay.base_url in failed["error"], failed["error"]
    for word in words:
        assert word in failed["error"], failed["error"]
    assert took < TIMEOUT + 5, took
    # The socket stays open and answers the next action.
    assert ws.call("list_checkpoints", run_id=run_id)["type"] == "result"
    assert_fsck(srv.session_path(sid))
    assert "model error" in (srv.log_path.read_text() if srv.log_path else "")
    # The server is back: the same run resumes in place and completes.
    replay.answers.clear()
    replay.default = text_stream("Back again.")
    replay.release.set()
    resumed = ws.call("continue_run", run_id=run_id)
    assert resumed["type"] == "result" and resumed["data"]["run_id"] == run_id, resumed
    done = ws.event("run_completed", timeout=15)["data"]
    assert done["run_id"] == run_id
    assert done["messages"][-1]["content"] == "Back again."
    assert_fsck(srv.session_path(sid))
    ws.close()


@pytest.mark.slow
def test_a_server_that_is_down(server_factory: Any) -> None:
    port = free_port()
    replay = ReplayServer()
    replay.port = port  # nothing listens there yet
    srv = start(server_factory, replay.base_url)
    sid = srv.new_session()
    ws = srv.socket(sid)
    run_id = ws.call("send_message", text="hello")["data"]["run_id"]
    failed = ws.event("run_error", timeout=TIMEOUT + 10)["data"]
    assert f"could not reach the model server at {replay.base_url}" in failed["error"]
    assert "refused" in failed["error"].lower(), failed["error"]
    assert_fsck(srv.session_path(sid))
    replay.start(port)  # the server comes up
    try:
        replay.default = text_stream("Up now.")
        assert ws.call("continue_run", run_id=run_id)["type"] == "result"
        done = ws.event("run_completed", timeout=15)["data"]
        assert done["messages"][-1]["content"] == "Up now."
    finally:
        replay.stop()
    ws.close()


@pytest.mark.slow
def test_a_hung_server_times_out(server_factory: Any, replay: ReplayServer) -> None:
    hang = text_stream("never finished")
    hang.mode = "hang"
    replay.push(hang)
    srv = start(server_factory, replay.base_url)
    fail_then_resume(srv, replay, [f"sent nothing for {TIMEOUT:g} s", "BRAID_MODEL_TIMEOUT"])


@pytest.mark.parametrize("status,message,words", [
    (401, "Invalid API key", ["refused the API key (401)", "OPENAI_API_KEY", "Invalid API key"]),
    pytest.param(404, "model 'smollm2' not found", ["has no model named 'smollm2'", "not found"],
                 marks=pytest.mark.slow),
    pytest.param(500, "CUDA out of memory", ["failed while answering (500)",
                                             "CUDA out of memory"], marks=pytest.mark.slow),
    pytest.param(429, "slow down", ["limiting requests", "try again later"],
                 marks=pytest.mark.slow),
])
def test_error_statuses_get_a_sentence(server_factory: Any, replay: ReplayServer, status: int,
                                       message: str, words: list[str]) -> None:
    replay.push(error(status, message))
    srv = start(server_factory, replay.base_url)
    fail_then_resume(srv, replay, words)


@pytest.mark.slow
def test_a_connection_dropped_before_any_answer(server_factory: Any,
                                                replay: ReplayServer) -> None:
    drop = text_stream("x")
    drop.mode = "drop"
    replay.push(drop)
    srv = start(server_factory, replay.base_url)
    fail_then_resume(srv, replay, ["could not reach the model server"])
