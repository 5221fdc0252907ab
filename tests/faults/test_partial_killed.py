"""kill -9 while an answer streams: the text so far was written to the turn's pending folder
as it streamed (at most once a second, `turns._PartialSaver`), so recovery commits it with
the INTERRUPTED run, as the answer the user watched; a stop (SIGTERM) already kept it."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import Server, assert_fsck, free_port, git

WORDS = [f"streamed{i}" for i in range(60)]
SLOW = "slow 300\nsay " + " ".join(WORDS)  # a word every 300 ms: ~18 s, killed long before


def test_a_killed_server_keeps_the_streamed_text_of_the_interrupted_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data_dir=data, port=free_port()).start()
    sid = srv.new_session()
    ws = srv.socket(sid)
    try:
        run_id = ws.call("send_message", text=SLOW)["data"]["run_id"]
        # Nine words: over 2.4 s of streaming, so at least one save (a second in) is done
        # (saves are awaited before the next word goes out).
        for _ in range(9):
            ws.event("message_delta")
    finally:
        ws.close()
    srv.stop(signal.SIGKILL)
    again = Server(data_dir=data, port=free_port()).start()
    try:
        runs = again.settled_runs(sid, 1)
        assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "INTERRUPTED")]
        status, body = again.api("GET", f"/api/runs/{run_id}?session_id={sid}")
        assert status == 200, body
        answers = [m for m in body["messages"] if m["role"] == "assistant"]
        assert len(answers) == 1, answers
        kept = answers[0]
        assert kept["partial"] is True
        assert kept["id"] == run_id  # the message the answer would have been
        assert kept["content"].startswith("streamed0 streamed1 streamed2 streamed3")
        assert (" ".join(WORDS)).startswith(kept["content"].rstrip())
        repo = again.session_path(sid)
        assert "streamed3" in git(repo, "log", "-p", "-1", "--format=%s", "main")
        assert_fsck(repo)
        # And the run resumes from there.
        status, body = again.api("POST", f"/api/runs/{run_id}/continue",
                                 {"session_id": sid, "input": "say resumed"})
        assert status == 200, body
        assert body["messages"][-1]["content"] == "resumed"
    finally:
        again.stop()
