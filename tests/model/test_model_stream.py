"""The stream reader on real servers' recorded chunks (tests/fixtures/model-streams) and on
the shapes other servers send (reasoning, several tool calls, pieces of names)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server.model.messages import INVALID_ARGS_KEY, arguments_error, to_model
from server.model.stream import StreamAssembler, StreamError, estimate_usage
from tests.model_replay import SHARED, all_cases, load_case


def chunks(body: bytes) -> list[dict[str, Any]]:
    out = []
    for line in body.decode().splitlines():
        if line.startswith("data: ") and line.strip() != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def assemble(events: list[dict[str, Any]]) -> Any:
    asm = StreamAssembler()
    for event in events:
        asm.add(event)
    return asm.finish()


def test_a_repeated_name_and_id_are_not_appended() -> None:
    # llama-cpp-python repeats the full name and the same id in every chunk (failure 1).
    case = load_case("llama-cpp-python-0.3.36", "forced-tool-call-braid-request")
    events = chunks(case.answer.body)
    assert sum(1 for e in events for c in e["choices"]
               if (c["delta"].get("tool_calls") or [{}])[0].get("function")) > 3
    reply = assemble(events)
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["function"]["name"] == "write_file"
    assert call["id"] == "call__0_write_file_cmpl-c1fb6b79-a2b8-4232-a01a-56c3eb53d13d"
    assert call["function"]["arguments"] == '{"path": "hello.txt", "content": ")\n{ "} '
    assert reply.finish_reason == "tool_calls"


def test_a_valid_forced_call_assembles_to_json() -> None:
    reply = assemble(chunks(load_case("llama-cpp-python-0.3.36",
                                      "forced-tool-call-direct").answer.body))
    args = json.loads(reply.tool_calls[0]["function"]["arguments"])
    assert args["path"] == "hello.txt" and args["content"].startswith("\nHi world")


def test_usage_is_read_when_sent_and_estimated_when_not() -> None:
    with_usage = assemble(chunks(load_case("llama-server", "plain-stream-with-usage")
                                 .answer.body))
    assert with_usage.content == "The capital of France is Paris."
    assert with_usage.usage == {"prompt_tokens": 109, "completion_tokens": 8}
    plain = load_case("llama-cpp-python-0.3.36", "plain-stream")
    reply = assemble(chunks(plain.answer.body))
    assert reply.usage == {}  # llama-cpp-python ignores stream_options (failure 7)
    estimate = estimate_usage(plain.request["messages"], reply)
    assert estimate["estimated"] is True
    assert estimate["prompt_tokens"] > 50 and estimate["completion_tokens"] > 5


def test_finish_reason_length_is_kept() -> None:
    reply = assemble(chunks(load_case("llama-server", "forced-tool-call-direct").answer.body))
    assert reply.finish_reason == "length"
    assert reply.content.startswith("```javascript")


def test_an_empty_200_is_an_error() -> None:
    case = load_case("llama-cpp-python-0.3.36", "auto-tool-choice-empty-200")
    assert chunks(case.answer.body) == []
    with pytest.raises(StreamError, match="no data at all"):
        assemble([])


def test_a_stream_cut_off_before_its_finish_reason_is_an_error() -> None:
    events = chunks(load_case("llama-server", "plain-stream-with-usage").answer.body)[:4]
    with pytest.raises(StreamError, match="cut off") as info:
        assemble(events)
    assert info.value.partial.content  # what had arrived is kept for the transcript


def test_reasoning_several_calls_and_names_in_pieces() -> None:
    def ev(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    asm = StreamAssembler()
    shown = asm.add(ev({"reasoning_content": "Let me think. "}))
    shown += asm.add(ev({"reasoning": "Two files."}))
    for delta in (
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "write", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"name": "_file", "arguments": '{"path":'}}]},
        {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "read_file",
                                                              "arguments": '{"path": "b"}'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "a", "content": "x"}'}}]},
        # a server that resends the complete arguments at the end
        {"tool_calls": [{"index": 1, "id": "b", "function": {"arguments": '{"path": "b"}'}}]},
    ):
        asm.add(ev(delta))
    asm.add(ev({}, "tool_calls"))
    reply = asm.finish()
    assert shown == [("reasoning", "Let me think. "), ("reasoning", "Two files.")]
    assert reply.reasoning == "Let me think. Two files."
    assert [(c["id"], c["function"]["name"]) for c in reply.tool_calls] == [
        ("a", "write_file"), ("b", "read_file")]
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"path": "a",
                                                                         "content": "x"}
    assert reply.tool_calls[1]["function"]["arguments"] == '{"path": "b"}'


def test_requests_never_carry_null_content_broken_arguments_or_partials() -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "reasoning": "hmm", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "write_file", "arguments": '{"path": "a", "content": ")\n"}'}}]},
        {"role": "tool", "content": "error: …", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Half an ans", "partial": True},
    ]
    sent = to_model(history, "base")
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["content"] == ""  # failure 2: null is refused by llama-cpp-python
    args = sent[2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {INVALID_ARGS_KEY: '{"path": "a", "content": ")\n"}'}  # failure 3
    assert "reasoning_content" not in sent[2]
    assert to_model(history, "base", send_reasoning=True)[2]["reasoning_content"] == "hmm"
    assert "not valid JSON" in (arguments_error(history[1]["tool_calls"][0]["function"]
                                                ["arguments"]) or "")
    assert arguments_error('{"path": "a"}') is None


def test_the_fixtures_are_the_shared_recordings() -> None:
    """The cases are copied into tests/fixtures so a fresh clone needs nothing beside it;
    where shared/ sits beside the checkout, the copies must match it case for case."""
    ours = {c.key: c for c in all_cases()}
    assert len(ours) == 8
    if not SHARED.is_dir():
        return
    theirs = {c.key: c for c in all_cases(SHARED)}
    assert set(theirs) <= set(ours)
    for key, case in theirs.items():
        assert ours[key].answer == case.answer and ours[key].request == case.request, key
