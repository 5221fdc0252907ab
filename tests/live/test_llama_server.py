"""Braid against a real OpenAI-compatible server: llama.cpp's llama-server with SmolLM2-135M
(tests/live/llama.py). Few and short: answers are capped by each endpoint's max_tokens."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from conftest import assert_fsck, git
from tests.live.llama import FRAME_WAIT, MODEL_WAIT, Llama, braid_on, runs_json, use


def kinds(path: Path) -> list[str]:
    out = git(path, "log", "--reverse", "--format=%(trailers:key=Braid-Kind,valueonly)")
    return [line for line in out.split() if line]


def test_a_streamed_answer(server_factory: Any, tmp_path: Path, llama: Llama) -> None:
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama")
    ws.call("send_message", text="What is the capital of France?")
    deltas = 0
    while True:
        frame = ws.until(lambda f: f.get("type") == "event", timeout=FRAME_WAIT)
        if frame["event"] == "message_delta":
            deltas += 1
        if frame["event"] in ("run_completed", "run_error"):
            break
    done = frame["data"]
    assert frame["event"] == "run_completed", done.get("error")
    assert deltas > 3  # it streamed
    answer = done["messages"][-1]
    assert answer["role"] == "assistant" and answer["content"].strip()
    run = done["run"]
    assert run["model"] == "smollm2" and run["endpoint"] == "llama"
    assert run["usage"]["completion_tokens"] > 0 and not run["usage"].get("estimated")
    assert_fsck(srv.session_path(sid))
    ws.close()


def test_a_forced_tool_call_writes_a_file_and_the_next_turn_is_accepted(
        server_factory: Any, tmp_path: Path, llama: Llama) -> None:
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama-tools")
    run_id = ws.call("send_message", text="Create a file hello.txt containing hi")["data"][
        "run_id"]
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert done["event"] == "run_completed", done["data"].get("error")
    messages = done["data"]["messages"]
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    assert calls and all(c["function"]["name"] == "write_file" for c in calls)
    path = srv.session_path(sid)
    written = sorted(p.relative_to(path / "workdir").as_posix()
                     for p in (path / "workdir").rglob("*") if p.is_file())
    assert written, messages
    assert "tool-batch" in kinds(path) and kinds(path)[-1] == "turn"
    files = ws.call("list_turn_files", turn_id=run_id)["data"]["paths"]
    assert sorted(f["path"] for f in files) == written
    assert all(f["status"] == "added" for f in files)
    # The page shows the file chips of the turn.
    page = _page(srv, sid)
    for name in written:
        assert f'data-path="{name}" data-status="added"' in page, name
    # The next turn replays the tool call and its result: the server accepts the request.
    use(ws, "smollm2@llama")
    ws.call("send_message", text="Thanks. What did you do?")
    nxt = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert nxt["event"] == "run_completed", nxt["data"].get("error")
    assert_fsck(path)
    ws.close()


def _page(srv: Any, sid: str) -> str:
    import urllib.request

    req = urllib.request.Request(f"{srv.base_url}/s/{sid}")
    req.add_header("Cookie", f"braid_token={srv.token}")
    req.add_header("Authorization", f"Bearer {srv.token}")
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.read().decode()


def test_cancel_mid_stream(server_factory: Any, tmp_path: Path, llama: Llama) -> None:
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama-long")
    run_id = ws.call("send_message", text="Write a long story about a dragon.")["data"][
        "run_id"]
    ws.event("message_delta", timeout=FRAME_WAIT)
    stopped = ws.call("cancel_run", run_id=run_id)
    assert stopped["data"]["status"] == "CANCELLED", stopped
    status, run = srv.api("GET", f"/api/runs/{run_id}?session_id={sid}")
    assert status == 200 and run["status"] == "CANCELLED"
    assert any(m.get("partial") and m["content"] for m in run["messages"])  # kept
    assert_fsck(srv.session_path(sid))
    ws.close()


def test_the_server_killed_mid_stream_then_resume(server_factory: Any, tmp_path: Path,
                                                  llama_factory: Any) -> None:
    llama = llama_factory()
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama-long")
    run_id = ws.call("send_message", text="Write a long story about a dragon.")["data"][
        "run_id"]
    ws.event("message_delta", timeout=FRAME_WAIT)
    llama.stop(signal.SIGKILL)
    failed = ws.event("run_error", timeout=FRAME_WAIT)["data"]
    assert llama.base_url in failed["error"], failed["error"]
    partial = [m for m in failed["messages"] if m.get("partial")]
    assert partial and partial[0]["content"]
    assert_fsck(srv.session_path(sid))
    llama_factory(port=llama.port)  # back on the same port
    use(ws, "smollm2@llama")
    resumed = ws.call("continue_run", run_id=run_id)
    assert resumed["type"] == "result" and resumed["data"]["run_id"] == run_id, resumed
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert done["event"] == "run_completed", done["data"].get("error")
    answers = [m for m in done["data"]["messages"]
               if m["role"] == "assistant" and not m.get("partial")]
    assert answers and answers[-1]["content"].strip()
    # The draft was not sent back as a prefix to continue (llama-server would continue it,
    # and the page would show the text twice): the answer is a fresh one, so under greedy
    # decoding it starts as the draft did, and the page folds the draft away.
    assert answers[-1]["content"].startswith(partial[0]["content"].strip()[:20])
    assert "Interrupted draft" in _page(srv, sid)
    assert_fsck(srv.session_path(sid))
    ws.close()


def test_continue_and_regenerate(server_factory: Any, tmp_path: Path, llama: Llama) -> None:
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama")
    first = ws.call("send_message", text="Name a colour.")["data"]["run_id"]
    assert ws.until(lambda f: f.get("event") in ("run_completed", "run_error"),
                    timeout=FRAME_WAIT)["event"] == "run_completed"
    again = ws.call("continue_run", run_id=first, regenerate=True)
    assert again["type"] == "result" and again["data"]["forked_from_run_id"] == first, again
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert done["event"] == "run_completed", done["data"].get("error")
    more = ws.call("continue_run", run_id=again["data"]["run_id"], input="And another one?")
    assert more["type"] == "result", more
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert done["event"] == "run_completed", done["data"].get("error")
    assert_fsck(srv.session_path(sid))
    ws.close()


def test_a_forced_spawn_runs_children_whose_files_land_in_the_merge(
        server_factory: Any, tmp_path: Path, llama: Llama) -> None:
    """The model is forced to call `spawn_sub_agents` (the 135M model calls tools only when
    forced); each child is forced to write a file (`sub_tool_choice`); the test merges the
    branches the spawn returned, and every child's file is in the merged workdir."""
    path = tmp_path / "spawn.toml"
    path.write_text(
        f'[[endpoints]]\nname = "llama-spawn"\nbase_url = "{llama.base_url}"\n'
        'tool_choice = "spawn_sub_agents"\nsub_tool_choice = "write_file"\n'
        # The server constrains a forced call by the tool's schema: with every string and
        # list argument bounded, the call's JSON ends within max_tokens however this CPU
        # decodes (at temperature 0 the 135M model's tokens differ between CPUs; unbounded, a
        # prompt ran on until max_tokens cut the call off, or 8 children per call ran).
        'max_argument_chars = 24\nmax_argument_items = 2\n'
        'params = { max_tokens = 600, temperature = 0, repeat_penalty = 1.3, '
        'repeat_last_n = 16, parallel_tool_calls = false }\n'
        f'[[endpoints]]\nname = "llama"\nbase_url = "{llama.base_url}"\n'
        'tool_choice = "none"\nparams = { max_tokens = 32, temperature = 0 }\n')
    srv = server_factory(BRAID_ENDPOINTS=str(path), BRAID_MODEL_TIMEOUT=str(MODEL_WAIT),
                         BRAID_MODEL_RETRIES="0", BRAID_SUBAGENTS_PARALLEL="2",
                         BRAID_CONTEXT_TOKENS="2500")
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama-spawn")
    ws.call("send_message", text="Use two sub-agents: one writes a.txt with the word apple, "
            "the other writes b.txt with the word banana.")
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error")
                    and not f["data"].get("branch"), timeout=600)
    messages = done["data"]["messages"]
    (tmp_path.parent / "spawn-run.json").write_text(json.dumps(messages, indent=1))
    assert done["event"] == "run_completed", (done["data"].get("error"), runs_json(messages))
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    assert calls and calls[0]["function"]["name"] == "spawn_sub_agents"
    result = next(m["content"] for m in messages if m["role"] == "tool")
    assert not result.startswith("error:"), result
    agents = json.loads(result)["agents"]
    assert agents and all(a["status"] == "COMPLETED" for a in agents), agents
    written = {f["path"] for a in agents for f in a["files"] if f["status"] != "deleted"}
    assert written, agents  # each child was forced to write a file
    use(ws, "smollm2@llama")
    # The merge's answer is the real model's, sent the children's answers: give it time.
    merged = ws.reply(ws.send("merge_branches", branches=[a["branch"] for a in agents],
                              message="Merge the sub-agents' work", strategy="theirs"),
                      timeout=300)
    assert merged["type"] == "result", merged
    repo = srv.session_path(sid)
    parents = git(repo, "log", "-1", "--format=%P", merged["data"]["commit_id"]).split()
    assert parents[1:] == [a["commit_id"] for a in agents]
    for name in written:
        assert (repo / "workdir" / name).is_file(), name
    assert_fsck(repo)
    ws.close()


def test_a_real_server_answers_a_compaction_request(server_factory: Any, tmp_path: Path,
                                                    llama: Llama) -> None:
    """`compact` on a real model: its summary (whatever a tiny model says, never empty) is
    committed as a `compaction` run, and the next turn is sent it in place of the runs it
    covers and is accepted by the server."""
    srv = braid_on(server_factory, tmp_path, llama)
    sid = srv.new_session()
    ws = srv.socket(sid)
    use(ws, "smollm2@llama")
    for text in ("My name is Ada.", "I live in Paris.", "What is 2 + 2?"):
        ws.call("send_message", text=text)
        done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"),
                        timeout=FRAME_WAIT)
        assert done["event"] == "run_completed", done["data"].get("error")
    reply = ws.call("compact")
    assert reply["type"] == "result", reply
    run_id = reply["data"]["run_id"]
    path = srv.session_path(sid)
    assert kinds(path)[-1] == "compaction"
    names = git(path, "ls-tree", "-r", "--name-only", "HEAD", "runs/").split()
    record = json.loads(git(path, "show", f"HEAD:{next(n for n in names if run_id in n)}"))
    assert record["kind"] == "compaction" and record["summary"].strip()
    assert record["covers"]["turns"] == 2 and record["usage"].get("completion_tokens", 0) > 0
    ws.call("send_message", text="Say hello.")
    done = ws.until(lambda f: f.get("event") in ("run_completed", "run_error"), timeout=FRAME_WAIT)
    assert done["event"] == "run_completed", done["data"].get("error")
    assert done["data"]["run"]["context"]["summary_run_id"] == run_id
    assert_fsck(path)
    ws.close()
