"""A small real HTTP server that answers `/v1/chat/completions` with recorded responses of
real OpenAI-compatible servers (tests/fixtures/model-streams, copied from shared/), or with
scripted failures: a hang, a dropped connection, a stream cut off midway, an error status.
It records every request body, so tests check what Braid sent. Loaded as a pytest plugin
by the root conftest (`replay` fixture)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

CASES = Path(__file__).resolve().parent / "fixtures" / "model-streams"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "model-streams"
_CURL_TRAILER = re.compile(rb"\n*HTTP \d{3} [\d.]+s?\n*$")


@dataclass
class Answer:
    status: int = 200
    content_type: str = "text/event-stream"
    body: bytes = b""
    mode: str = "send"  # send | hang | drop | cut (send half the events, then close)
    delay: float = 0.0  # seconds between events


@dataclass
class Case:
    server: str
    name: str
    request: dict[str, Any]
    answer: Answer
    note: str

    @property
    def key(self) -> str:
        return f"{self.server}/{self.name}"


def load_case(server: str, name: str, root: Path = CASES) -> Case:
    base = root / server / name
    meta = json.loads(base.with_name(name + ".meta.json").read_text())
    body = _CURL_TRAILER.sub(b"\n", base.with_name(name + ".response").read_bytes())
    if not meta["content_type"].startswith("text/event-stream"):
        body = body.strip()
    request = json.loads(base.with_name(name + ".request.json").read_text())
    return Case(server, name, request,
                Answer(int(meta["status"]), meta["content_type"], body), meta.get("note", ""))


def all_cases(root: Path = CASES) -> list[Case]:
    return [load_case(p.parent.name, p.name[: -len(".meta.json")], root)
            for p in sorted(root.glob("*/*.meta.json"))]


def text_stream(text: str, *, usage: bool = False, pieces: int = 4) -> Answer:
    """A well-formed text stream, cut into `pieces` deltas."""
    step = max(1, len(text) // pieces)
    parts = [text[i:i + step] for i in range(0, len(text), step)]
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
               for p in parts]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage:
        events.append({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7,
                                                "total_tokens": 18}})
    return Answer(body=sse(events))


def sse(events: list[dict[str, Any]]) -> bytes:
    base = {"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 1,
            "model": "smollm2"}
    lines = [b"data: " + json.dumps({**base, **e}).encode() + b"\n\n" for e in events]
    return b"".join(lines) + b"data: [DONE]\n\n"


def error(status: int, message: str) -> Answer:
    body = json.dumps({"error": {"code": status, "message": message, "type": "error"}})
    return Answer(status, "application/json", body.encode())


class _Handler(BaseHTTPRequestHandler):
    """One replay server's answers, in order (`replay` is set per server)."""

    protocol_version = "HTTP/1.1"
    replay: ReplayServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.rstrip("/") != "/v1/models":
            return self._send(error(404, f"no route {self.path}"))
        data = {"object": "list", "data": [{"id": m, "object": "model",
                                            "owned_by": "replay"} for m in self.replay.models]}
        self._send(Answer(200, "application/json", json.dumps(data).encode()))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsed": raw.decode(errors="replace")}
        body["_headers"] = {"authorization": self.headers.get("Authorization", "")}
        body["_path"] = self.path  # with its query, as it came
        self.replay.requests.append(body)
        if self.path.partition("?")[0].rstrip("/") != "/v1/chat/completions":
            return self._send(error(404, f"no route {self.path}"))
        answer = self.replay.answers.pop(0) if self.replay.answers else self.replay.default
        self._send(answer)

    def _send(self, answer: Answer) -> None:
        if answer.mode == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        streaming = answer.content_type.startswith("text/event-stream")
        if not streaming:
            self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        events = answer.body.split(b"\n\n") if streaming else [answer.body]
        if answer.mode == "cut":
            events = [e for e in events if e.strip()][: max(1, len(events) // 2)]
        for i, event in enumerate(events):
            if not event.strip() and streaming:
                continue
            self.wfile.write(event + (b"\n\n" if streaming else b""))
            self.wfile.flush()
            if answer.mode == "hang" and i == 0:
                self.replay.release.wait(60)
                return
            if answer.delay:
                time.sleep(answer.delay)


@dataclass
class ReplayServer:
    answers: list[Answer] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["smollm2"])
    default: Answer = field(default_factory=lambda: text_stream("ok, noted."))
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    def start(self, port: int = 0) -> ReplayServer:
        handler = type("Handler", (_Handler,), {"replay": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()
