"""How a branch's messages are sent to the model: requests every server accepts.

- An assistant message with tool calls carries `content: ""`, never null: llama-cpp-python
  answers 500 to null, and every later request on the branch would replay it.
- Tool-call arguments that are not valid JSON are replayed as a valid JSON object holding
  the text (llama-server refuses a whole request whose history has broken arguments); the
  stored message keeps what the model really sent.
- A partial answer (a stream that broke) is not sent: servers such as llama-server continue a
  trailing assistant message as a prefix, so a resumed run would repeat it; the model answers
  afresh instead, and the page folds the broken draft away.
- Reasoning (`reasoning_content`) is kept in the message but only replayed to an endpoint that
  asks for it (`send_reasoning`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable

from server.base.memo import IdentityMemo, forget_with_memos
from server.base.records import MessageRecord, ModelMessage, ToolCall
from server.store import context

INVALID_ARGS_KEY = "invalid_json_arguments"


def valid_arguments(raw: object) -> str:
    """The arguments as a JSON text a server will parse."""
    return _valid_text(raw if isinstance(raw, str) else json.dumps(raw))


@functools.lru_cache(maxsize=16384)
def _valid_text(text: str) -> str:
    # Cached: every call of a long chat replays the same arguments (context budget: many).
    if not text.strip():
        return "{}"
    try:
        json.loads(text)
    except ValueError:
        return json.dumps({INVALID_ARGS_KEY: text[:4000]})
    return text


# Its texts are the released sessions' arguments once none is open (issue 11).
forget_with_memos(_valid_text.cache_clear)


def arguments_error(raw: object) -> str | None:
    """The tool result for arguments that are not a JSON object, else None."""
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        return (f"error: your arguments were not valid JSON: {e}. Call the tool again with "
                "a JSON object (escape newlines in strings as \\n).")
    if not isinstance(value, dict):
        return "error: your arguments must be a JSON object, not " + type(value).__name__
    return None


def _call(call: ToolCall) -> ToolCall:
    fn = call.get("function") or {}
    return {"id": str(call.get("id") or ""), "type": "function",
            "function": {"name": str(fn.get("name") or ""),
                         "arguments": valid_arguments(fn.get("arguments"))}}


def shape(msg: MessageRecord, send_reasoning: bool = False) -> ModelMessage | None:
    """One message as the request carries it (None: not sent)."""
    role = msg["role"]
    if role == "assistant" and msg.get("partial"):
        return None
    item: ModelMessage = {"role": role, "content": msg.get("content") or ""}
    if role == "assistant" and msg.get("tool_calls"):
        item["tool_calls"] = [_call(c) for c in msg["tool_calls"]]
    if role == "assistant" and send_reasoning and msg.get("reasoning"):
        item["reasoning_content"] = msg["reasoning"]
    if role == "tool":
        item["tool_call_id"] = msg.get("tool_call_id", "")
    return item


# `shape` made once per message (base/memo.py), by `send_reasoning`. Shared: do not change.
SHAPED: dict[bool, IdentityMemo[ModelMessage | None]] = {
    False: IdentityMemo(lambda m: shape(m, False)), True: IdentityMemo(lambda m: shape(m, True))}


def to_model(messages: Iterable[MessageRecord], system_prompt: str,
             send_reasoning: bool = False) -> list[ModelMessage]:
    """The request's `messages`: the base prompt, then the given messages, shaped (the
    items are shared between calls: do not change them)."""
    out: list[ModelMessage] = [{"role": "system", "content": system_prompt}]
    out.extend(filter(None, SHAPED[send_reasoning].many(messages)))
    return out


def _masked(msg: MessageRecord) -> ModelMessage | None:
    """A tool result as an old one is sent when the budget is short: the call it answers
    is kept, its output replaced by a marker (context.mask_marker)."""
    return {"role": "tool", "content": context.mask_marker(msg),
            "tool_call_id": msg.get("tool_call_id", "")}


# A message as the masked part of a window sends it: a tool result's marker, else `shape`.
def _masked_or_shaped(msg: MessageRecord, send_reasoning: bool) -> ModelMessage | None:
    return _masked(msg) if context.MASKABLE.get(msg) else shape(msg, send_reasoning)


MASKED: dict[bool, IdentityMemo[ModelMessage | None]] = {
    False: IdentityMemo(lambda m: _masked_or_shaped(m, False)),
    True: IdentityMemo(lambda m: _masked_or_shaped(m, True))}


def to_model_window(heads: Iterable[str], masked: list[MessageRecord],
                    whole: list[MessageRecord], send_reasoning: bool = False
                    ) -> list[ModelMessage]:
    """The request's `messages` with a context window (context.fit_window): the system
    messages `heads` (the base prompt, instructions, a summary, a note), the older messages
    with their tool output masked, then the newest whole."""
    out: list[ModelMessage] = [{"role": "system", "content": h} for h in heads]
    out.extend(filter(None, MASKED[send_reasoning].many(masked)))
    out.extend(filter(None, SHAPED[send_reasoning].many(whole)))
    return out
