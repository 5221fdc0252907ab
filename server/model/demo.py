"""The embedded demo model (DESIGN §6): an OpenAI-compatible Chat Completions endpoint.

It is a raw ASGI3 app so the real `openai` client can talk to it in-process (no port, no
network) and so server/core needs no web framework. Its behaviour is a pure function of the
request (`demo_script.py`: the last user message read line by line as instructions), which
lets tests and demos drive tool calls, multi-batch turns, errors and slow streams without a
real model. This module streams it the way real servers do.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson

from server.model.demo_script import DemoError, Reply, respond, usage

if TYPE_CHECKING:
    import openai

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
MODEL_ID = "demo"

def _pieces(text: str, count: int = 3) -> list[str]:
    # Arguments arrive in a few pieces, as from OpenAI, so clients must really assemble them.
    size = max(8, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _deltas(reply: Reply) -> list[dict[str, Any]]:
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


async def _stream(request: dict[str, Any], reply: Reply, cid: str,
                  prompt_tokens: int) -> AsyncIterator[bytes]:
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
        chunks.append({**base, "choices": [], "usage": usage(prompt_tokens, reply)})
    for i, chunk in enumerate(chunks):
        if i and reply.slow_ms:
            await asyncio.sleep(reply.slow_ms / 1000)
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _completion(request: dict[str, Any], reply: Reply, cid: str,
                prompt_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()),
        "model": request.get("model") or MODEL_ID, "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": usage(prompt_tokens, reply),
    }


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: Receive) -> bytes:
    body: bytes = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def _parse(body: bytes) -> Any:
    """The request's JSON. A model reads all it is sent, and a long chat sends its context
    window twice a turn (~220 KB at the default budget): orjson reads it in about half the
    time json takes. What orjson refuses and json takes (NaN, integers past 64 bits) is
    read by json as before, and json's message names what is wrong with a bad body."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def _load(body: bytes) -> dict[str, Any]:
    try:
        request = _parse(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DemoError(400, f"Invalid JSON body: {exc}", "invalid_request_error") from exc
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise DemoError(400, "Body must be an object with a 'messages' list",
                         "invalid_request_error")
    return request


async def _chat(receive: Receive, send: Send) -> None:
    body = await _read_body(receive)
    request = _load(body)
    cid = _completion_id(body)
    reply = respond(request)
    prompt_tokens = len(body) // 4
    if not request.get("stream"):
        if reply.slow_ms:
            await asyncio.sleep(reply.slow_ms / 1000)
        await _send_json(send, 200, _completion(request, reply, cid, prompt_tokens))
        return
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    async for chunk in _stream(request, reply, cid, prompt_tokens):
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
                    raise DemoError(405, "Method not allowed", "invalid_request_error")
                await _chat(receive, send)
            elif path in ("/v1/models", "/models"):
                if method != "GET":
                    raise DemoError(405, "Method not allowed", "invalid_request_error")
                model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "braid"}
                await _send_json(send, 200, {"object": "list", "data": [model]})
            else:
                raise DemoError(404, f"Unknown path {path}", "invalid_request_error")
        except DemoError as err:
            error = {"message": err.message, "type": err.kind, "param": None, "code": None}
            await _send_json(send, err.status, {"error": error})

    return app


_END = object()  # the app finished: no more body


def _body_stream(queue: asyncio.Queue[Any], task: asyncio.Task[None]) -> Any:
    """The response body as an httpx2 stream fed by the app's `send` calls."""
    return _body_class()(queue, task)


@functools.cache
def _body_class() -> type:
    """One class for every response (httpx2 is imported on first use): a class made per
    call is a reference cycle, and it held each call's queue and task until the cyclic GC
    came by, which a serving process runs rarely (gc_tuning.py; issue 11: RSS after load)."""
    import httpx2

    class Body(httpx2.AsyncByteStream):
        def __init__(self, queue: asyncio.Queue[Any], task: asyncio.Task[None]) -> None:
            self.queue, self.task = queue, task

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                message = await self.queue.get()
                if message is _END:
                    error = None if self.task.cancelled() else self.task.exception()
                    if error is not None:
                        raise error
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    return

        async def aclose(self) -> None:
            # A client that stops reading (the user pressed stop) ends the app too.
            self.task.cancel()

    return Body


def _scope(request: Any) -> Scope:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.url.scheme,
        "path": request.url.path, "raw_path": request.url.raw_path.split(b"?")[0],
        "query_string": request.url.query, "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "server": (request.url.host, request.url.port), "client": ("127.0.0.1", 123),
    }


def _streaming_transport(app: ASGIApp) -> Any:
    """An httpx2 transport that hands the ASGI body to the client chunk by chunk.

    httpx2.ASGITransport runs the app to completion and joins the body into one piece, so a
    `slow` stream would reach the client all at once, at the end. This one runs the app in a
    task and returns the response as soon as it starts, the way a socket would.
    """
    import httpx2

    class Transport(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            stream = request.stream  # an async client's (httpx2.ASGITransport asserts it too)
            assert isinstance(stream, httpx2.AsyncByteStream)
            body = b"".join([part async for part in stream])
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
            scope = _scope(request)

            async def run() -> None:  # a coroutine: ASGIApp is typed to return any awaitable
                await app(scope, receive, queue.put)

            def finished(_: asyncio.Task[None]) -> None:
                closed.set()
                queue.put_nowait(_END)

            task = asyncio.create_task(run())
            task.add_done_callback(finished)
            start = await queue.get()
            if start is _END:
                task.result()  # re-raises the app's error
                raise RuntimeError("demo app ended without a response")
            return httpx2.Response(start["status"], headers=start.get("headers", []),
                                   stream=_body_stream(queue, task))

    return Transport()


def demo_client(**kw: Any) -> openai.AsyncOpenAI:
    """A real `openai.AsyncOpenAI` wired to the demo model in-process; `kw` overrides defaults."""
    import httpx2
    import openai

    http_client = httpx2.AsyncClient(transport=_streaming_transport(create_demo_app()))
    options: dict[str, Any] = {"api_key": "demo", "base_url": "http://demo.invalid/v1",
                               "max_retries": 0, "http_client": http_client}
    options.update(kw)
    return openai.AsyncOpenAI(**options)
