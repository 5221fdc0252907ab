"""Conformance: every recorded stream of a real server (tests/fixtures/model-streams)
replayed through a local HTTP server to a real `Braid`, checking the run, the tool calls, the
commits (git CLI) and what Braid sent next; and the seven failures of issue 10."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, git, new_session, run_turn
from server.app.braid import Braid
from server.features import revert, timetravel
from tests.model_replay import Answer, ReplayServer, load_case, sse, text_stream

MakeBraid = Callable[..., Awaitable[Braid]]
LCP, LS = "llama-cpp-python-0.3.36", "llama-server"


async def real(make_braid: MakeBraid, replay: ReplayServer, **kw: Any) -> Braid:
    return await make_braid(model="smollm2", openai_base_url=replay.base_url,
                            model_retries=0, model_timeout=kw.pop("model_timeout", 10), **kw)


def kinds(path: Path) -> list[str]:
    out = git(path, "log", "--reverse", "--format=%(trailers:key=Braid-Kind,valueonly)")
    return [line for line in out.split() if line]


def sent_messages(replay: ReplayServer, n: int) -> list[dict[str, Any]]:
    return replay.requests[n]["messages"]


async def test_plain_stream_without_usage_completes_with_an_estimate(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    braid = await real(make_braid, replay)
    replay.push(load_case(LCP, "plain-stream").answer)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "What is the capital of France?")
    assert run["status"] == "COMPLETED"
    assert run["messages"][-1]["content"] == "La femme de la voile (Fox) - Paris, France"
    assert run["model"] == "smollm2" and run["endpoint"] == "default"
    usage = run["usage"]  # failure 7: no usage from the server, so an estimate
    assert usage["estimated"] is True and usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0
    assert kinds(path) == ["import", "turn"] or kinds(path)[-1] == "turn"
    assert_fsck(path)


async def test_plain_stream_with_usage_records_the_servers_numbers(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    braid = await real(make_braid, replay)
    replay.push(load_case(LS, "plain-stream-with-usage").answer)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "What is the capital of France?")
    assert run["status"] == "COMPLETED"
    assert run["messages"][-1]["content"] == "The capital of France is Paris."
    assert run["usage"] == {"prompt_tokens": 109, "completion_tokens": 8}
    record = json.loads(git(path, "show", f"HEAD:{_record_path(path, run['run_id'])}"))
    assert record["usage"] == run["usage"] and record["model"] == "smollm2"


def _record_path(path: Path, run_id: str) -> str:
    names = git(path, "ls-tree", "-r", "--name-only", "HEAD", "runs").split()
    return next(n for n in names if n.endswith(f"{run_id}.json"))


async def test_repeated_names_make_one_call_and_bad_arguments_get_a_tool_error(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    """Failures 1, 2 and 3 on llama-cpp-python's own chunks."""
    braid = await real(make_braid, replay)
    replay.push(load_case(LCP, "forced-tool-call-braid-request").answer,
                text_stream("Sorry, I will fix the arguments."))
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "Create a file hello.txt containing hi")
    assert run["status"] == "COMPLETED", run["error"]
    roles = [m["role"] for m in run["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = run["messages"][1]["tool_calls"][0]
    assert call["function"]["name"] == "write_file"  # not write_filewrite_file…
    tool = run["messages"][2]
    assert tool["is_error"] and "your arguments were not valid JSON" in tool["content"]
    assert not (path / "workdir/hello.txt").exists()
    # What the next request replayed: "" beside tool_calls, arguments as valid JSON.
    replayed = sent_messages(replay, 1)
    assistant = next(m for m in replayed if m.get("tool_calls"))
    assert assistant["content"] == ""
    json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert kinds(path)[-2:] == ["tool-batch", "turn"]
    assert_fsck(path)


async def test_a_forced_tool_call_writes_the_file_and_the_next_turn_is_accepted(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    braid = await real(make_braid, replay)
    replay.push(load_case(LCP, "forced-tool-call-direct").answer, text_stream("Done."),
                load_case(LS, "plain-stream-with-usage").answer)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "Create a file hello.txt containing hi")
    assert run["status"] == "COMPLETED"
    assert (path / "workdir/hello.txt").read_text().startswith("\nHi world")
    files = await revert.list_turn_files(braid, "local", sid, run["run_id"])
    assert files["paths"] == [{"path": "hello.txt", "status": "added"}]
    assert kinds(path)[-2:] == ["tool-batch", "turn"]
    nxt = await run_turn(braid, sid, "What is the capital of France?")
    assert nxt["status"] == "COMPLETED"
    for body in replay.requests:
        for msg in body["messages"]:
            assert msg.get("content") is not None
    assert_fsck(path)


async def test_finish_reason_length_is_reported(make_braid: MakeBraid,
                                                replay: ReplayServer) -> None:
    braid = await real(make_braid, replay)
    replay.push(load_case(LS, "forced-tool-call-direct").answer)
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "Create a file hello.txt containing hi")
    assert run["status"] == "COMPLETED"
    assert "token limit" in run["warning"]
    assert run["messages"][-1]["finish_reason"] == "length"


@pytest.mark.parametrize("server,case,words", [
    (LCP, "auto-tool-choice-empty-200", "no data at all"),
    (LCP, "content-null-500", "failed while answering (500): 7 validation errors"),
    (LS, "bad-arguments-500", "Failed to parse tool call arguments as JSON"),
])
async def test_recorded_failures_end_the_run_in_error_naming_the_server(
        make_braid: MakeBraid, replay: ReplayServer, server: str, case: str,
        words: str) -> None:
    braid = await real(make_braid, replay)
    replay.push(load_case(server, case).answer)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "hello")
    assert run["status"] == "ERROR"  # failure 4: an empty 200 is no success
    assert replay.base_url in run["error"] and words in run["error"]
    assert kinds(path)[-1] == "turn"
    assert_fsck(path)


async def test_every_recorded_request_shape_is_one_braid_sends(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    """Braid's request as the recordings show it: same keys, streamed, usage asked."""
    braid = await real(make_braid, replay)
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "hi")
    ours = replay.requests[0]
    recorded = load_case(LCP, "plain-stream").request
    assert ours["stream"] is True and ours["stream_options"] == {"include_usage": True}
    # The recordings predate the shell on by default (sandboxed) and the model's sub-agent
    # tools (agent/orchestrate.py): they follow.
    assert [t["function"]["name"] for t in ours["tools"]] == \
        [t["function"]["name"] for t in recorded["tools"]] + ["shell", "spawn_sub_agents",
                                                              "merge_branches"]
    assert "tool_choice" not in ours  # "auto" only where it helps: never by default


async def test_resume_after_a_cut_stream_does_not_repeat_the_partial_answer(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    """Failure 6: the partial answer is not sent back as a trailing assistant message."""
    braid = await real(make_braid, replay)
    long = "Paris is the capital of France and its largest city. " * 3
    cut = text_stream(long, pieces=8)
    cut.mode = "cut"
    replay.push(cut, text_stream("Paris."))
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "capital?")
    assert run["status"] == "ERROR" and "cut off" in run["error"]
    partial = [m for m in run["messages"] if m.get("partial")]
    assert partial and partial[0]["content"] and partial[0]["content"] in long
    await timetravel.continue_run_to_end(braid, "local", sid, run["run_id"])
    resumed = await _run(braid, sid, run["run_id"])
    assert resumed["status"] == "COMPLETED"
    assert sent_messages(replay, 1)[-1] == {"role": "user", "content": "capital?"}
    assert resumed["messages"][-1]["content"] == "Paris."
    assert_fsck(path)


async def _run(braid: Braid, sid: str, run_id: str) -> dict[str, Any]:
    from server.features import sessions

    return await sessions.get_run(braid, "local", sid, run_id)


async def test_several_tool_calls_in_one_response_each_run(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    def call(i: int, name: str, args: dict[str, str]) -> dict[str, Any]:
        return {"choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "id": f"c{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]}}]}

    replay.push(Answer(body=sse([
        {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "two"},
                      "finish_reason": None}]},
        call(0, "write_file", {"path": "a.txt", "content": "A"}),
        call(1, "write_file", {"path": "b.txt", "content": "B"}),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}])),
        text_stream("Both written."))
    braid = await real(make_braid, replay)
    sid, path = await new_session(braid)
    run = await run_turn(braid, sid, "write two files")
    assert run["status"] == "COMPLETED"
    assert (path / "workdir/a.txt").read_text() == "A"
    assert (path / "workdir/b.txt").read_text() == "B"
    assert run["messages"][1]["reasoning"] == "two"
    # reasoning is not sent back by default
    assert all("reasoning_content" not in m for m in sent_messages(replay, 1))


@pytest.mark.parametrize("named", [False, True])
async def test_a_forced_tool_choice_shapes_the_first_call_only(
        make_braid: MakeBraid, replay: ReplayServer, tmp_path: Path, named: bool) -> None:
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(json.dumps([{
        "name": "local", "base_url": replay.base_url, "tool_choice": "write_file",
        "named_tool_choice": named, "params": {"max_tokens": 64, "temperature": 0}}]))
    braid = await real(make_braid, replay, endpoints_file=endpoints)
    replay.push(load_case(LCP, "forced-tool-call-direct").answer, text_stream("Done."))
    sid, path = await new_session(braid)
    braid.store.get(sid).meta["model"] = "smollm2@local"
    run = await run_turn(braid, sid, "Create a file hello.txt containing hi")
    assert run["status"] == "COMPLETED" and run["endpoint"] == "local"
    first, second = replay.requests[0], replay.requests[1]
    assert [t["function"]["name"] for t in first["tools"]] == ["write_file"]
    assert first["tool_choice"] == ({"type": "function", "function": {"name": "write_file"}}
                                    if named else "required")
    assert second["tool_choice"] == "none"  # then the model answers from the result
    assert first["max_tokens"] == 64 and first["temperature"] == 0
    assert (path / "workdir/hello.txt").exists()
