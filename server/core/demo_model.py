"""The embedded demo model (DESIGN §6): an OpenAI-compatible Chat Completions endpoint.

It is a raw ASGI3 app so the real `openai` client can talk to it in-process (no port, no
network) and so server/core needs no web framework. Its behaviour is a pure function of the
request: the last user message is read line by line as instructions (write, append, delete,
read, shell, batch, say, fail, slow, recall, notes), which lets tests and demos drive tool
calls, multi-batch turns, errors and slow streams without a real model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MODEL_ID = "demo"
_KEYWORDS = {"write", "append", "delete", "read", "shell", "batch", "say", "fail", "slow",
             "recall", "notes"}
_VERBS = {"write_file": "wrote", "edit_file": "appended", "delete_file": "deleted",
          "read_file": "read", "shell": "ran"}
_BRANCH_LINE = re.compile(r"^- [^:]+: ?(.*)$")


@dataclass
class _Plan:
    """What the last user message asks for."""

    batches: list[list[tuple[str, dict[str, str]]]] = field(default_factory=list)
    says: list[str] = field(default_factory=list)
    fail: str | None = None
    slow_ms: int = 0
    recall: bool = False
    notes: bool = False


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _text(content: Any) -> str:
    """Message content as plain text; null and list-of-parts contents are legal in the API."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else p.get("text") or "" for p in content
            if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))
        )
    return str(content)


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n")


def _parse(user_text: str, has_shell: bool) -> _Plan:
    plan = _Plan()
    current: list[tuple[str, dict[str, str]]] = []
    for raw in user_text.split("\n"):
        line = raw.rstrip("\r")
        word, _, rest = line.partition(" ")
        if word not in _KEYWORDS:
            continue
        path, _, body = rest.partition(" ")
        if word == "write" and path:
            current.append(("write_file", {"path": path, "content": _unescape(body) + "\n"}))
        elif word == "append" and path:
            args = {"path": path, "old_text": "", "new_text": _unescape(body) + "\n"}
            current.append(("edit_file", args))
        elif word in ("delete", "read") and path:
            current.append((f"{word}_file", {"path": path}))
        elif word == "shell" and has_shell and rest.strip():
            current.append(("shell", {"command": rest}))
        elif word == "batch":
            # Empty batches are dropped: a response with no tool calls would end the turn.
            if current:
                plan.batches.append(current)
            current = []
        elif word == "say":
            plan.says.append(rest)
        elif word == "fail" and plan.fail is None:
            plan.fail = rest or "demo model failure"
        elif word == "slow" and rest.strip().isdigit():
            plan.slow_ms = int(rest.strip())
        elif word == "recall":
            plan.recall = True
        elif word == "notes":
            plan.notes = True
    if current:
        plan.batches.append(current)
    return plan


@dataclass
class _MergeNote:
    finals: list[str]
    conflicts: list[str]


def _merge_note(messages: list[dict[str, Any]]) -> _MergeNote | None:
    """The merge note of the current turn: a system message other than the first (the base
    prompt) whose first line starts with `Merge turn`, with `- BRANCH: TEXT` lines and maybe a
    `Conflicts:` list of `- PATH` lines. Only notes after the previous user message count, so
    a merge earlier in the chat does not turn every later answer into `merged: ...`; among
    those the last one wins."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    start = users[-2] + 1 if len(users) >= 2 else 0
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    for i in reversed(systems[1:]):
        if i < start:
            break
        lines = _text(messages[i].get("content")).split("\n")
        if not lines[0].startswith("Merge turn"):
            continue
        note = _MergeNote([], [])
        in_conflicts = False
        for line in lines[1:]:
            if line.strip() == "Conflicts:":
                in_conflicts = True
            elif in_conflicts:
                if line.startswith("- ") and line[2:].strip():
                    note.conflicts.append(line[2:].strip())
                else:
                    in_conflicts = False
            elif match := _BRANCH_LINE.match(line):
                note.finals.append(match.group(1))
        if note.finals:
            return note
    return None


def _keep_both_sides(text: str) -> str:
    """A file with conflict markers resolved by keeping both sides (ours, then theirs)."""
    out, in_base = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("|||||||"):
            in_base = True  # diff3 style: the ancestor's lines are dropped
        elif line.startswith("======="):
            in_base = False
        elif line.startswith(("<<<<<<<", ">>>>>>>")):
            in_base = False
        elif not in_base:
            out.append(line)
    return "".join(out)


def _conflict_batches(
    note: _MergeNote, messages: list[dict[str, Any]], after: int
) -> list[list[tuple[str, dict[str, str]]]]:
    """A merge turn with conflicts: read every conflicted file in one batch, then write each
    one back with its markers resolved, from what the reads returned."""
    batches: list[list[tuple[str, dict[str, str]]]] = [
        [("read_file", {"path": p}) for p in note.conflicts]]
    reads = next((m for m in messages[after:]
                  if m.get("role") == "assistant" and m.get("tool_calls")), None)
    if reads is None:
        return batches + [[]]  # the writes are known once the reads have answered
    paths = {}
    for call in reads.get("tool_calls") or ():
        try:
            paths[call.get("id")] = json.loads(call["function"]["arguments"]).get("path")
        except (KeyError, TypeError, ValueError):
            continue
    writes = []
    for m in messages[after:]:
        path = paths.get(m.get("tool_call_id")) if m.get("role") == "tool" else None
        content = _text(m.get("content"))
        if path and not content.startswith("error:"):
            writes.append(("write_file", {"path": path, "content": _keep_both_sides(content)}))
    return batches + [writes]


@dataclass
class _Reply:
    content: str | None
    tool_calls: list[dict[str, Any]]
    slow_ms: int


def _respond(request: dict[str, Any]) -> _Reply:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = request.get("tools") or []
    has_shell = any(
        isinstance(t, dict) and (t.get("function") or {}).get("name") == "shell" for t in tools
    )
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    user_text = _text(messages[last_user].get("content")) if last_user >= 0 else ""
    plan = _parse(user_text, has_shell)
    if plan.fail is not None:
        raise _HTTPError(500, plan.fail, "server_error")

    def calls_batch(m: dict[str, Any]) -> bool:
        return m.get("role") == "assistant" and bool(m.get("tool_calls"))

    done = sum(1 for m in messages[last_user + 1 :] if calls_batch(m))
    note = _merge_note(messages)
    if note is not None and note.conflicts:
        plan.batches = [b for b in _conflict_batches(note, messages, last_user + 1) if b] \
            + plan.batches
    if done < len(plan.batches):
        # Numbered over the whole conversation so ids stay unique across turns too.
        n = sum(1 for m in messages if calls_batch(m)) + 1
        calls = [
            {"id": f"call_{n}_{k}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for k, (name, args) in enumerate(plan.batches[done])
        ]
        return _Reply(None, calls, plan.slow_ms)

    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    systems = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    merged = "merged: " + "; ".join(note.finals) if note is not None else None
    ran = [(name, args) for batch in plan.batches for name, args in batch]
    if plan.says:
        answer = "\n".join(plan.says)
    elif merged is not None:
        answer = merged
    elif ran:
        answer = "done: " + ", ".join(
            f"{_VERBS[name]} {args.get('path', args.get('command', ''))}" for name, args in ran
        )
    elif plan.recall:
        answer = " | ".join(users)
    elif plan.notes:
        answer = " | ".join(systems[1:]) or "no notes"
    else:
        answer = "echo: " + user_text
    return _Reply(answer, [], plan.slow_ms)


def _usage(request: dict[str, Any], reply: _Reply) -> dict[str, int]:
    prompt = sum(len(_text(m.get("content")).split()) for m in request.get("messages") or []
                 if isinstance(m, dict))
    completion = len((reply.content or "").split()) + sum(
        len(c["function"]["arguments"].split()) for c in reply.tool_calls
    )
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _pieces(text: str, count: int = 3) -> list[str]:
    # Arguments arrive in a few pieces, as from OpenAI, so clients must really assemble them.
    size = max(8, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _deltas(reply: _Reply) -> list[dict[str, Any]]:
    if not reply.tool_calls:
        # Word by word, spaces kept, so joining the deltas gives back the exact text.
        words = re.findall(r"\s*\S+\s*", reply.content or "") or [reply.content or ""]
        return [{"role": "assistant", "content": ""}] + [{"content": w} for w in words if w]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None}]
    for index, call in enumerate(reply.tool_calls):
        fn = call["function"]
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": fn["name"], "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                   for piece in _pieces(fn["arguments"])]
    return deltas


def _completion_id(body: bytes) -> str:
    # From the body as it came: re-encoding a long chat's request would cost as much again.
    return "chatcmpl-demo-" + hashlib.sha256(body).hexdigest()[:24]


async def _stream(request: dict[str, Any], reply: _Reply, cid: str) -> AsyncIterator[bytes]:
    base = {"id": cid, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": request.get("model") or MODEL_ID,
            "system_fingerprint": None}
    options = request.get("stream_options") or {}
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    finish = "tool_calls" if reply.tool_calls else "stop"
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}
        for d in _deltas(reply)
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": finish}]})
    if include_usage:
        for chunk in chunks:
            chunk["usage"] = None
        chunks.append({**base, "choices": [], "usage": _usage(request, reply)})
    for i, chunk in enumerate(chunks):
        if i and reply.slow_ms:
            await asyncio.sleep(reply.slow_ms / 1000)
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _completion(request: dict[str, Any], reply: _Reply, cid: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()),
        "model": request.get("model") or MODEL_ID, "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": _usage(request, reply),
    }


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def _load(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _HTTPError(400, f"Invalid JSON body: {exc}", "invalid_request_error") from exc
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise _HTTPError(400, "Body must be an object with a 'messages' list",
                         "invalid_request_error")
    return request


async def _chat(receive: Receive, send: Send) -> None:
    body = await _read_body(receive)
    request = _load(body)
    cid = _completion_id(body)
    reply = _respond(request)
    if not request.get("stream"):
        if reply.slow_ms:
            await asyncio.sleep(reply.slow_ms / 1000)
        await _send_json(send, 200, _completion(request, reply, cid))
        return
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    async for chunk in _stream(request, reply, cid):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def create_demo_app() -> ASGIApp:
    """The demo model as a raw ASGI3 app (also mountable under a real server)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path.rstrip("/") or "/"
        method = scope["method"]
        try:
            if path in ("/v1/chat/completions", "/chat/completions"):
                if method != "POST":
                    raise _HTTPError(405, "Method not allowed", "invalid_request_error")
                await _chat(receive, send)
            elif path in ("/v1/models", "/models"):
                if method != "GET":
                    raise _HTTPError(405, "Method not allowed", "invalid_request_error")
                model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "braid"}
                await _send_json(send, 200, {"object": "list", "data": [model]})
            else:
                raise _HTTPError(404, f"Unknown path {path}", "invalid_request_error")
        except _HTTPError as err:
            error = {"message": err.message, "type": err.kind, "param": None, "code": None}
            await _send_json(send, err.status, {"error": error})

    return app


def _streaming_transport(app: ASGIApp) -> Any:
    """An httpx2 transport that hands the ASGI body to the client chunk by chunk.

    httpx2.ASGITransport runs the app to completion and joins the body into one piece, so a
    `slow` stream would reach the client all at once, at the end. This one runs the app in a
    task and returns the response as soon as it starts, the way a socket would.
    """
    import httpx2

    end = object()

    class _Body(httpx2.AsyncByteStream):
        def __init__(self, queue: asyncio.Queue[Any], task: asyncio.Task[None]) -> None:
            self._queue, self._task = queue, task

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                message = await self._queue.get()
                if message is end:
                    if not self._task.cancelled() and self._task.exception():
                        raise self._task.exception()  # type: ignore[misc]
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    return

        async def aclose(self) -> None:
            # A client that stops reading (the user pressed stop) ends the app too.
            self._task.cancel()

    class _Transport(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
            closed = asyncio.Event()
            sent = False

            async def receive() -> Message:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await closed.wait()
                return {"type": "http.disconnect"}

            queue: asyncio.Queue[Any] = asyncio.Queue()
            scope = {
                "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                "method": request.method, "scheme": request.url.scheme,
                "path": request.url.path, "raw_path": request.url.raw_path.split(b"?")[0],
                "query_string": request.url.query, "root_path": "",
                "headers": [(k.lower(), v) for k, v in request.headers.raw],
                "server": (request.url.host, request.url.port), "client": ("127.0.0.1", 123),
            }
            task = asyncio.create_task(app(scope, receive, queue.put))
            task.add_done_callback(lambda _: (closed.set(), queue.put_nowait(end)))
            start = await queue.get()
            if start is end:
                task.result()  # re-raises the app's error
                raise RuntimeError("demo app ended without a response")
            return httpx2.Response(start["status"], headers=start.get("headers", []),
                                   stream=_Body(queue, task))

    return _Transport()


def demo_client(**kw: Any) -> openai.AsyncOpenAI:
    """A real `openai.AsyncOpenAI` wired to the demo model in-process; `kw` overrides defaults."""
    import httpx2
    import openai

    http_client = httpx2.AsyncClient(transport=_streaming_transport(create_demo_app()))
    options: dict[str, Any] = {"api_key": "demo", "base_url": "http://demo.invalid/v1",
                               "max_retries": 0, "http_client": http_client}
    options.update(kw)
    return openai.AsyncOpenAI(**options)
