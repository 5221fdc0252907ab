"""Assembling one Chat Completions stream into a reply, as real servers speak the protocol.

Why not the openai library's `ChatCompletionStreamState`: it concatenates every string field
of a tool-call delta, so a server that repeats the full `function.name` and the same `id` in
each chunk (llama-cpp-python 0.3.x does) gets `write_filewrite_file…`. Here tool calls are
merged by `index`: an `id` or `name` equal to what the slot already holds is a repetition, not
a new piece. Content, DeepSeek/Qwen-style `reasoning_content` (or `reasoning`), several tool
calls, `finish_reason` and usage are all kept; a stream that ends without a finish reason or
without anything in it is an error the caller reports, never a silent empty answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from server.base.records import ModelMessage, ToolCall, Usage
from server.model.body import encoded


@dataclass
class Reply:
    """One model response assembled from its stream."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    chunks: int = 0


class StreamError(Exception):
    """The stream broke the protocol (empty, truncated). `partial` is what had arrived."""

    def __init__(self, message: str, partial: Reply) -> None:
        super().__init__(message)
        self.partial = partial


def _as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)  # an openai pydantic model, extra fields included
    return dict(to_dict()) if to_dict else dict(vars(obj))


class StreamAssembler:
    """Feed chunks (dicts or openai chunk objects) with `add`; each returns the text deltas
    to show (`("content"|"reasoning", text)`); `finish()` returns the Reply."""

    def __init__(self) -> None:
        self.reply = Reply()
        self._calls: dict[int, ToolCall] = {}

    def add(self, chunk: Any) -> list[tuple[str, str]]:
        data = _as_dict(chunk)
        self.reply.chunks += 1
        out: list[tuple[str, str]] = []
        usage = data.get("usage")
        if isinstance(usage, dict) and usage:
            self.reply.usage = {
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
            }
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue  # n > 1 is never asked for; another choice is not this answer
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.reply.content += text
                out.append(("content", text))
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.reply.reasoning += thought
                out.append(("reasoning", thought))
            for pos, tc in enumerate(delta.get("tool_calls") or ()):
                if isinstance(tc, dict):
                    self._merge_call(tc, pos)
            if choice.get("finish_reason"):
                self.reply.finish_reason = str(choice["finish_reason"])
        return out

    def _merge_call(self, tc: dict[str, Any], pos: int) -> None:
        index = tc.get("index")
        index = index if isinstance(index, int) else pos  # some servers leave it out
        slot = self._calls.setdefault(index, {
            "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        call_id = tc.get("id")
        if isinstance(call_id, str) and call_id and call_id != slot["id"]:
            slot["id"] = call_id if not slot["id"] else slot["id"]
        fn = tc.get("function") or {}
        name = fn.get("name")
        if isinstance(name, str) and name and name != slot["function"]["name"]:
            slot["function"]["name"] += name  # a name streamed in pieces; a repeat is skipped
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            have = slot["function"]["arguments"]
            # A server that resends the whole arguments at the end sends a repeat of a
            # complete JSON text: appending it would make it invalid.
            if not (args == have and _is_json(have)):
                slot["function"]["arguments"] = have + args

    def finish(self) -> Reply:
        reply = self.reply
        reply.tool_calls = [self._calls[i] for i in sorted(self._calls)]
        for n, call in enumerate(reply.tool_calls):
            if not call["id"]:
                call["id"] = f"call_{n}"  # a result must name its call: make one up
        if reply.chunks == 0:
            raise StreamError("the server answered 200 but sent no data at all", reply)
        if reply.finish_reason is None:
            if not (reply.content or reply.tool_calls or reply.reasoning):
                raise StreamError("the server's stream ended without an answer "
                                  f"({reply.chunks} empty chunks, no finish_reason)", reply)
            raise StreamError("the stream was cut off before the model finished "
                              "(no finish_reason)", reply)
        if not (reply.content or reply.tool_calls or reply.reasoning):
            raise StreamError(f"the model's answer was empty (finish_reason: "
                              f"{reply.finish_reason})", reply)
        return reply


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def estimate_tokens(text: str) -> int:
    """About four characters per token: the usual rule for English and code, for servers that
    send no usage (llama-cpp-python ignores `stream_options`)."""
    return (len(text) + 3) // 4


def estimate_usage(messages: list[ModelMessage], reply: Reply) -> Usage:
    # From each message's JSON as the request carried it (made once per message).
    prompt = sum((len(encoded(m)) + 3) // 4 for m in messages)
    out = reply.content + reply.reasoning + "".join(
        c["function"]["name"] + c["function"]["arguments"] for c in reply.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": estimate_tokens(out),
            "estimated": True}
