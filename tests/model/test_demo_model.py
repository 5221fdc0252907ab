"""The demo model, driven through the real `openai` client as Braid's agent loop drives it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import pytest

from server.model.demo import create_demo_app, demo_client
from server.model.demo_script import batch_count

SHELL_TOOL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
BASE = {"role": "system", "content": "You are Braid's agent."}


@dataclass
class Result:
    content: str = ""
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    content_chunks: int = 0
    argument_chunks: int = 0
    usage: Any = None
    arrivals: list[float] = field(default_factory=list)

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(c["name"], json.loads(c["arguments"])) for _, c in sorted(self.tool_calls.items())]


async def stream(messages: list[dict[str, Any]], **kw: Any) -> Result:
    """Assemble a streamed answer the way an agent loop does, delta by delta."""
    result = Result()
    start = time.monotonic()
    client = demo_client()
    chunks = await client.chat.completions.create(
        model="demo", messages=messages, stream=True, **kw  # type: ignore[arg-type]
    )
    async for chunk in chunks:
        result.arrivals.append(time.monotonic() - start)
        if chunk.usage is not None:
            result.usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            result.content += choice.delta.content
            result.content_chunks += 1
        for tc in choice.delta.tool_calls or []:
            call = result.tool_calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                call["id"] = tc.id
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
                result.argument_chunks += 1
        if choice.finish_reason:
            result.finish_reason = choice.finish_reason
    return result


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def batch_messages(result: Result) -> list[dict[str, Any]]:
    """The assistant message and tool results that Braid appends after running a batch."""
    calls = [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}}
        for _, c in sorted(result.tool_calls.items())
    ]
    tools = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *tools]


async def test_echo_streams_in_several_chunks() -> None:
    result = await stream([BASE, user("hello there, demo")])
    assert result.content == "echo: hello there, demo"
    assert result.content_chunks >= 3
    assert result.finish_reason == "stop"
    assert result.tool_calls == {}


async def test_odd_contents_do_not_crash() -> None:
    parts = [{"type": "text", "text": "from "}, {"type": "text", "text": "parts"}]
    messages = [BASE, user("old"), {"role": "assistant", "content": None},
                {"role": "user", "content": parts}]
    result = await stream(messages)
    assert result.content == "echo: from parts"


async def test_write_is_a_streamed_tool_call() -> None:
    result = await stream([BASE, user("write notes/a.txt hello world\\nsecond line")])
    assert result.finish_reason == "tool_calls"
    assert result.calls() == [
        ("write_file", {"path": "notes/a.txt", "content": "hello world\nsecond line\n"})
    ]
    assert result.tool_calls[0]["id"].startswith("call_")
    assert result.argument_chunks > 1  # arguments arrive in pieces, as from OpenAI
    assert result.content == ""


async def test_write_with_empty_text_and_append() -> None:
    result = await stream([BASE, user("write empty.txt\nappend log.txt more")])
    assert result.calls() == [
        ("write_file", {"path": "empty.txt", "content": "\n"}),
        ("edit_file", {"path": "log.txt", "old_text": "", "new_text": "more\n"}),
    ]
    ids = [c["id"] for c in result.tool_calls.values()]
    assert len(set(ids)) == 2


async def test_batches_come_one_response_at_a_time_then_done() -> None:
    text = "write a.txt A\nappend b.txt B\nbatch\ndelete c.txt\nread d.txt"
    messages = [BASE, user(text)]
    first = await stream(messages)
    assert [name for name, _ in first.calls()] == ["write_file", "edit_file"]

    messages += batch_messages(first)
    second = await stream(messages)
    assert second.calls() == [("delete_file", {"path": "c.txt"}), ("read_file", {"path": "d.txt"})]
    first_ids = {c["id"] for c in first.tool_calls.values()}
    assert first_ids.isdisjoint(c["id"] for c in second.tool_calls.values())

    messages += batch_messages(second)
    final = await stream(messages)
    assert final.tool_calls == {}
    assert final.finish_reason == "stop"
    assert final.content == "done: wrote a.txt, appended b.txt, deleted c.txt, read d.txt"


async def test_say_is_the_final_answer_after_tools() -> None:
    messages = [BASE, user("say All set.\nwrite a.txt x")]
    first = await stream(messages)
    assert first.calls() == [("write_file", {"path": "a.txt", "content": "x\n"})]
    final = await stream(messages + batch_messages(first))
    assert final.content == "All set."


async def test_say_turns_backslash_n_into_a_newline() -> None:
    result = await stream([BASE, user("say line one\\n\\nline two")])
    assert result.content == "line one\n\nline two"


async def test_only_the_last_user_message_counts() -> None:
    old = await stream([BASE, user("write old.txt x")])
    messages = [BASE, user("write old.txt x"), *batch_messages(old),
                {"role": "assistant", "content": "done"}, user("say hi")]
    result = await stream(messages)
    assert result.tool_calls == {}
    assert result.content == "hi"


async def test_keywords_must_start_the_line_and_be_whole_words() -> None:
    result = await stream([BASE, user("please write a.txt x\nwriter a.txt y")])
    assert result.content == "echo: please write a.txt x\nwriter a.txt y"


async def test_recall_lists_user_messages_oldest_first() -> None:
    messages = [BASE, user("first"), {"role": "assistant", "content": "ok"}, user("recall")]
    result = await stream(messages)
    assert result.content == "first | recall"


async def test_notes_lists_later_system_messages() -> None:
    messages = [BASE, {"role": "system", "content": "note one"}, user("hi"),
                {"role": "system", "content": "note two"}, user("notes")]
    assert (await stream(messages)).content == "note one | note two"
    assert (await stream([BASE, user("notes")])).content == "no notes"


async def test_say_beats_recall_beats_notes() -> None:
    assert (await stream([BASE, user("notes\nrecall\nsay winner")])).content == "winner"
    assert (await stream([BASE, user("notes\nrecall")])).content == "notes\nrecall"


async def test_shell_only_when_the_tool_is_offered() -> None:
    with_shell = await stream([BASE, user("shell ls -la")], tools=[SHELL_TOOL])
    assert with_shell.calls() == [("shell", {"command": "ls -la"})]
    final = await stream([BASE, user("shell ls -la"), *batch_messages(with_shell)],
                         tools=[SHELL_TOOL])
    assert final.content == "done: ran ls -la"

    without = await stream([BASE, user("shell ls -la")])
    assert without.tool_calls == {}
    assert without.content == "echo: shell ls -la"


@pytest.mark.parametrize("streaming", [True, False])
async def test_fail_is_an_http_500(streaming: bool) -> None:
    client = demo_client()
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(
            model="demo", messages=[user("write a.txt x\nfail the model is down")],
            stream=streaming,
        )
    assert caught.value.status_code == 500
    assert "the model is down" in str(caught.value)
    assert caught.value.body == {"message": "the model is down", "type": "server_error",
                                 "param": None, "code": None}


async def test_slow_delays_between_chunks_and_really_streams() -> None:
    result = await stream([BASE, user("slow 100\nsay one two three")])
    assert result.content == "one two three"
    # role, 3 words and finish: 4 gaps of 100 ms.
    assert result.arrivals[-1] >= 0.8 * 0.4
    # Chunks reach the client as they are sent, not all together at the end.
    assert result.arrivals[-1] - result.arrivals[0] >= 0.8 * 0.3


async def test_closing_a_stream_early_is_clean() -> None:
    client = demo_client()
    chunks = await client.chat.completions.create(
        model="demo", messages=[user("slow 200\nsay " + "word " * 50)], stream=True
    )
    start = time.monotonic()
    async for _ in chunks:
        break
    await chunks.close()
    # The whole stream would take 10 s (50 gaps of 200 ms): closed, it ends long before,
    # however busy the machine.
    assert time.monotonic() - start < 5


async def test_non_stream_answer_and_tool_calls() -> None:
    client = demo_client()
    answer = await client.chat.completions.create(model="demo", messages=[BASE, user("say hi")])
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.content == "hi"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == 1

    calls = await client.chat.completions.create(
        model="demo", messages=[BASE, user("delete x.txt\nbatch\nread y.txt")]
    )
    choice = calls.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.function.name == "delete_file"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"path": "x.txt"}  # type: ignore[union-attr]


async def test_usage_in_the_last_chunk_when_asked() -> None:
    result = await stream([BASE, user("say a b c")], stream_options={"include_usage": True})
    assert result.usage is not None
    assert result.usage.completion_tokens == 3
    assert result.usage.total_tokens == result.usage.prompt_tokens + 3
    assert (await stream([BASE, user("say a")])).usage is None


async def test_merge_turn_joins_branch_answers() -> None:
    merge = {"role": "system",
             "content": "Merge turn: sub-agents finished\n- sub_a: made a.txt\n- sub_b: fixed b"}
    result = await stream([BASE, merge, user("merge them")])
    assert result.content == "merged: made a.txt; fixed b"
    assert (await stream([BASE, merge, user("say mine")])).content == "mine"
    # The base prompt is never read as a merge note.
    assert (await stream([merge, user("hi")])).content == "echo: hi"


async def test_models_and_http_errors() -> None:
    models = await demo_client().models.list()
    assert [m.id for m in models.data] == ["demo"]

    transport = httpx2.ASGITransport(app=create_demo_app())
    async with httpx2.AsyncClient(transport=transport, base_url="http://demo.invalid") as http:
        bad = await http.post("/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "invalid_request_error"
        missing = await http.get("/v1/nothing")
        assert missing.status_code == 404
        short = await http.post("/chat/completions", json={"messages": [user("hi")]})
        assert short.json()["choices"][0]["message"]["content"] == "echo: hi"


async def test_call_ids_count_every_batch_of_a_long_request() -> None:
    # Ids are numbered over every tool batch the request holds; only an assistant message
    # with tool calls counts (an empty list, a tool message, a plain answer do not).
    history: list[dict[str, Any]] = [BASE]
    for i in range(300):
        history += [user(f"write f{i}.txt x"),
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"c{i}", "type": "function",
                         "function": {"name": "write_file", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"},
                    {"role": "assistant", "content": "done", "tool_calls": []}]
    result = await stream(history + [user("write last.txt y")])
    assert [c["id"] for c in result.tool_calls.values()] == ["call_301_0"]
    assert batch_count(history) == 300


async def test_a_request_json_reads_is_still_read() -> None:
    # NaN and integers past 64 bits are JSON that Python's json reads and orjson refuses:
    # the demo model answers them as before.
    transport = httpx2.ASGITransport(app=create_demo_app())
    body = (b'{"messages": [{"role": "user", "content": "say ok"}], "temperature": NaN, '
            b'"seed": 123456789012345678901234567890}')
    async with httpx2.AsyncClient(transport=transport, base_url="http://demo.invalid") as http:
        answer = await http.post("/v1/chat/completions", content=body)
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == "ok"
        bad = await http.post("/v1/chat/completions", content=b'{"messages": [}')
        assert bad.status_code == 400
        assert "Invalid JSON body: Expecting value" in bad.json()["error"]["message"]


async def test_spawn_lines_make_one_call_and_merge_takes_its_branches() -> None:
    text = ("write a.txt a\nspawn red: write r.txt red\\nsay r\nspawn blue: say b\n"
            "merge theirs\nmerge them")
    first = await stream([BASE, user(text)])
    assert [name for name, _ in first.calls()] == ["write_file"]
    done_write = [BASE, user(text), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file",
                                                      "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    spawn = await stream(done_write)
    assert spawn.calls() == [("spawn_sub_agents", {"agents": [
        {"label": "red", "prompt": "write r.txt red\nsay r"},
        {"label": "blue", "prompt": "say b"}]})]
    result = {"agents": [{"label": "red", "branch": "sub_x_red_1", "final_text": "r"},
                         {"label": "blue", "branch": "sub_x_blue_2", "final_text": "b"}]}
    after = done_write + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "spawn_sub_agents",
                                                          "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(result)}]
    merge = await stream(after)  # "merge them" is no instruction: one merge call
    assert merge.calls() == [("merge_branches", {"branches": ["sub_x_red_1", "sub_x_blue_2"],
                                                 "strategy": "theirs"})]
    merged = after + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "merge_branches",
                                                          "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": '{"commit_id": "abc"}'}]
    assert (await stream(merged)).content == "merged: r; b"
    refused = merged[:-1] + [{"role": "tool", "tool_call_id": "c3", "content": json.dumps(
        {"conflicts": [{"path": "b.txt"}, {"path": "a.txt"}]})}]
    assert (await stream(refused)).content == "conflicts: a.txt, b.txt"


async def test_call_is_a_tool_call_of_any_tool_with_its_json_arguments() -> None:
    messages = [BASE, user('call mcp__files__read {"path": "a.txt", "n": 2}\ncall mcp__x__y\n'
                           "call bad {not json\ncall listy [1]")]
    first = await stream(messages)
    assert first.calls() == [("mcp__files__read", {"path": "a.txt", "n": 2}),
                             ("mcp__x__y", {})]  # a line whose JSON is not an object: none
    final = await stream(messages + batch_messages(first))
    assert final.content == "done: called mcp__files__read, called mcp__x__y"
