"""The session WebSocket: JSON action frames in; results, errors and the session's events out,
as JSON or as HTML fragments for htmx (`?format=html`, the default)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from server.base.errors import BadRequest, BraidError, NotFound
from server.base.events import FELL_BEHIND
from server.base.results import EventFrame
from server.web import hostile, live
from server.web.actions import ACTIONS
from server.web.auth import origin_allowed, signed_in, user_of
from server.web.errors import Frame, error_frame, result_frame
from server.web.render.frames import RENDERINGS, HtmlRenderer
from server.web.specs import ActionContext

log = logging.getLogger("braid.ws")
MAX_FRAME = 1_000_000
# What the server accepts on the wire (uvicorn's ws_max_size): frames between MAX_FRAME and
# this get an error frame; only beyond it does the protocol close the socket (1009).
WS_MAX_SIZE = 16_000_000
OUT_QUEUE = 64  # frames waiting for a client that does not read
OUT_BYTES = 8_000_000  # and the characters they hold (a page's frame can be a whole queue)
BEHIND = "fell behind: reconnect to catch up"  # a socket the bus let go (events.py)
# Its close code: 1013 "Try Again Later", one htmx-ext-ws reconnects on (1006, 1011, 1012,
# 1013). It was 4008, on which the page never reconnected: a long answer streamed fast left
# it "Reconnecting…" for good, the turn never shown.
BEHIND_CODE = 1013


def parse_frame(text: str) -> dict[str, Any]:
    if len(text) > MAX_FRAME:
        raise BadRequest(f"frame too large (at most {MAX_FRAME} characters)")
    frame = hostile.loads(text)
    if not isinstance(frame, dict):
        raise BadRequest("a frame must be a JSON object")
    frame.pop("HEADERS", None)  # htmx's ws extension adds its request headers
    action = frame.get("action")
    if not isinstance(action, str) or not action:
        raise BadRequest("the frame has no action")
    if action not in ACTIONS:
        raise BadRequest(f"unknown action {action!r}", {"actions": sorted(ACTIONS)})
    return frame


def _echo(text: str) -> tuple[Any, Any]:
    """The action and request id to echo in a reply, even for a frame that is refused."""
    if len(text) > MAX_FRAME:
        return None, None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(raw, dict):
        return None, None
    action, request_id = raw.get("action"), raw.get("request_id")
    ok = all(isinstance(v, (str, int, type(None))) and (not isinstance(v, str)
             or hostile.clean(v)) for v in (action, request_id))
    return (action, request_id) if ok else (None, None)


class Connection:
    """One socket. What it may hold is bounded (DESIGN §4 "Boundaries"): at most
    `BRAID_SOCKET_INFLIGHT` actions run at once (`slots`; the socket is not read meanwhile),
    and once `OUT_QUEUE` frames (or `OUT_BYTES` of them) wait for a client that does not
    read, whoever sends one more waits (the actions, the event forwarder) until the writer
    makes room, so a flood of frames cannot grow the server; the bus lets go of a socket
    whose forwarder waits too long (events.MAX_UNREAD), and it is closed. Frames go out in
    the order they were sent."""

    def __init__(self, ws: WebSocket, ctx: ActionContext, fmt: str, inflight: int = 32
                 ) -> None:
        self.ws = ws
        self.ctx = ctx
        self.fmt = fmt
        self.pending: deque[str] = deque()  # at most OUT_QUEUE + one per sender
        self.pending_chars = 0  # in `pending`: at most OUT_BYTES + one frame per sender
        self.ready = asyncio.Event()  # pending is not empty
        self.room = asyncio.Event()  # the writer took a frame
        self.gone = False  # the client left: frames are dropped, nobody waits for room
        self.html = HtmlRenderer(ctx) if fmt == "html" else None
        self.tasks: set[asyncio.Task[None]] = set()
        self.slots = asyncio.Semaphore(inflight)

    async def emit(self, frame: Frame) -> None:
        if self.html is None:
            await self.send(RENDERINGS[frame["event"]].json(frame) if frame["type"] == "event"
                            else json.dumps(frame))
            return
        try:
            text = await self.html.render(frame)
        except Exception:  # noqa: BLE001 - a render bug must not kill the socket
            log.exception("rendering %s failed",
                          frame["event"] if frame["type"] == "event" else frame["action"])
            return
        if text:
            await self.send(text)

    def push(self, text: str) -> None:
        if not self.gone:
            self.pending.append(text)
            self.pending_chars += len(text)
            self.ready.set()

    async def send(self, text: str) -> None:
        """Queue a frame, then wait while too many wait for the client (or until it left)."""
        self.push(text)
        while (len(self.pending) > OUT_QUEUE or self.pending_chars > OUT_BYTES) \
                and not self.gone:
            self.room.clear()
            await self.room.wait()

    def close(self) -> None:
        """The client left: senders waiting for room give up (their frames are dropped)."""
        self.gone = True
        self.pending.clear()
        self.pending_chars = 0
        self.room.set()

    async def writer(self) -> None:
        try:
            while True:
                while not self.pending:
                    self.ready.clear()
                    await self.ready.wait()
                text = self.pending.popleft()
                self.pending_chars -= len(text)
                self.room.set()
                await self.ws.send_text(text)
        except Exception:  # noqa: BLE001 - the client is gone (reset, closed)
            # Actions waiting for room give up their frames, free their slots, and the
            # receive loop reads on to the disconnect.
            self.close()

    async def forward_events(self, queue: asyncio.Queue[EventFrame]) -> None:
        while True:
            frame = await queue.get()
            if frame is FELL_BEHIND:  # the bus let this socket go: close it (not resent)
                self.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.ws.close(code=BEHIND_CODE, reason=BEHIND), 5)
                return
            await self.emit(frame)

    def finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def handle(self, text: str) -> None:
        action: Any = None
        request_id: Any = None
        try:
            action, request_id = _echo(text)
            frame = parse_frame(text)
            data = await ACTIONS[frame["action"]](self.ctx, frame)
            await self.emit(result_frame(action, request_id, data))
        except Exception as e:  # noqa: BLE001 - reported to the client, socket stays open
            if not isinstance(e, BraidError):
                log.exception("action %s failed", action)
            await self.emit(error_frame(action, request_id, e))


async def _open(ws: WebSocket) -> tuple[str, str, str] | None:
    """(user, session, format) of an accepted socket, or None once it is refused: another
    origin (4403), no valid token (4401), a session the caller does not own (4404)."""
    if not origin_allowed(ws):
        await ws.close(code=4403, reason="origin not allowed")
        return None
    if not signed_in(ws):
        await ws.close(code=4401, reason="a valid token is required")
        return None
    user_id = user_of(ws)
    fmt = ws.query_params.get("format", "html")
    await ws.accept()
    session_id = ws.path_params["session_id"]
    try:
        ws.app.state.braid.store.get_owned(user_id, session_id)
    except NotFound as e:
        if fmt == "json":
            await ws.send_text(json.dumps(error_frame(None, None, e)))
        else:
            await ws.send_text(HtmlRenderer.toast(e.message))
        await ws.close(code=4404)
        return None
    return user_id, session_id, fmt if fmt in ("html", "json") else "html"


async def _catch_up(ws: WebSocket, conn: Connection, running: Any) -> None:
    """The first HTML frame: what the page missed (a run going on, turns shown live)."""
    if conn.html is None:
        return
    try:
        full = ws.query_params.get("catchup") == "full"
        shown = [r for r in ws.query_params.get("live", "").split(",") if r][:20]
        first = await live.catch_up(conn.html, running, full, shown)
        if first:
            conn.push(first)
    except Exception:  # noqa: BLE001 - the socket works without its catch-up
        log.exception("catch-up of session %s failed", conn.ctx.session_id)


async def _receive(ws: WebSocket, conn: Connection) -> None:
    """Each frame in is handled on its own task, so a long action never blocks the next; with
    `BRAID_SOCKET_INFLIGHT` of them running, the next frame is not read until one ends (the
    client's sends then wait on TCP: nothing piles up here)."""
    try:
        while True:
            await conn.slots.acquire()
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            task = asyncio.create_task(conn.handle(text))
            conn.tasks.add(task)
            task.add_done_callback(conn.finished)
    except (WebSocketDisconnect, RuntimeError):
        pass


async def session_socket(ws: WebSocket) -> None:
    opened = await _open(ws)
    if opened is None:
        return
    user_id, session_id, fmt = opened
    braid = ws.app.state.braid
    conn = Connection(ws, ActionContext(braid, user_id, session_id, fmt), fmt,
                      braid.settings.socket_inflight)
    queue = braid.bus.subscribe(session_id)
    # Taken with the subscription, before any await: the catch-up frame and the queued
    # events after it neither miss nor repeat anything (a page opened mid-run streams on).
    running = live.snapshot(braid, session_id)
    writer = asyncio.create_task(conn.writer())
    await _catch_up(ws, conn, running)
    forwarder = asyncio.create_task(conn.forward_events(queue))
    try:
        await _receive(ws, conn)
    finally:
        braid.bus.unsubscribe(session_id, queue)
        conn.close()  # actions waiting to send give up their frames
        forwarder.cancel()
        writer.cancel()
        # Actions already started (a turn, a merge) go on without this socket.
