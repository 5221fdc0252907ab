"""Events across processes: `EventBus` over PostgreSQL `LISTEN/NOTIFY`.

A process delivers its own events to its own subscribers at once, as the in-process bus
does, and sends them to the others on one connection, in publish order; each process listens
on one connection and hands what the others sent to its subscribers, in arrival order. So
every event of a run reaches every tab, on any process, in the order it was published.

A NOTIFY payload holds at most 8000 bytes. Frames are sent in batches that fit; a frame too
large for one payload (a finished run with all its messages) is written to `braid_events`
and only its row id is sent: the listener reads the row before anything that came after it.
Rows are deleted after `KEEP_EVENTS`: a process that listens later never needs them."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from server.base.events import AnyEvent, EventBus
from server.base.results import EventFrame

log = logging.getLogger("braid.pg")
CHANNEL = "braid_events"
MAX_PAYLOAD = 7900  # PostgreSQL's limit is 8000 bytes
KEEP_EVENTS = "5 minutes"
SCHEMA = """
CREATE TABLE IF NOT EXISTS braid_events (
    id BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""


def _encode(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str, ensure_ascii=False)


class PgEventBus(EventBus):
    def __init__(self, url: str, origin: str) -> None:
        super().__init__()
        self.url = url
        self.origin = origin  # this process: its own notifications are not delivered twice
        self._outbox: asyncio.Queue[EventFrame | None] = asyncio.Queue()
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._send: Any = None
        self._listen: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._send_lock = asyncio.Lock()  # one query at a time on the sending connection
        # Sees every frame another process sent, before this process's subscribers do.
        self.on_remote: Callable[[EventFrame], None] | None = None

    async def start(self) -> None:
        import asyncpg

        self._send = await asyncpg.connect(self.url)
        await self._send.execute(SCHEMA)
        self._listen = await asyncpg.connect(self.url)
        await self._listen.add_listener(CHANNEL, self._on_notify)
        self._tasks = [asyncio.create_task(self._sender(), name="braid-bus-send"),
                       asyncio.create_task(self._receiver(), name="braid-bus-receive")]

    async def stop(self) -> None:
        """Send what is queued, then close both connections."""
        if not self._tasks:
            return
        self._outbox.put_nowait(None)
        sender, receiver = self._tasks
        try:
            await asyncio.wait_for(sender, timeout=10)
        except (TimeoutError, Exception):  # noqa: BLE001 - stopping anyway
            sender.cancel()
        receiver.cancel()
        self._tasks = []
        for conn in (self._listen, self._send):
            if conn is not None and not conn.is_closed():
                await conn.close()

    def publish(self, session_id: str, event: AnyEvent) -> EventFrame:
        frame = super().publish(session_id, event)
        if self._tasks:
            self._outbox.put_nowait(frame)
        return frame

    def _deliver(self, frame: EventFrame) -> None:
        session_id = str(frame.get("data", {}).get("session_id", ""))
        self.deliver(session_id, frame)

    # -- sending --------------------------------------------------------------------------

    async def _sender(self) -> None:
        while True:
            frame = await self._outbox.get()
            if frame is None:
                return
            batch = [_encode(frame)]
            size = len(batch[0].encode())
            # Whatever else is queued goes in the same notification while it fits.
            while not self._outbox.empty() and size < MAX_PAYLOAD:
                nxt = self._outbox.get_nowait()
                if nxt is None:
                    self._outbox.put_nowait(None)
                    break
                text = _encode(nxt)
                if size + len(text.encode()) + 1 > MAX_PAYLOAD - 64:
                    await self._notify(batch)
                    batch, size = [], 0
                batch.append(text)
                size += len(text.encode()) + 1
            if batch:
                await self._notify(batch)

    async def _notify(self, frames: list[str]) -> None:
        payload = f'{{"o":{json.dumps(self.origin)},"f":[{",".join(frames)}]}}'
        try:
            async with self._send_lock:
                if len(payload.encode()) > MAX_PAYLOAD:
                    row_id = await self._send.fetchval(
                        "INSERT INTO braid_events (payload) VALUES ($1) RETURNING id", payload)
                    payload = _encode({"o": self.origin, "ref": row_id})
                await self._send.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
        except Exception:  # noqa: BLE001 - the local tabs have it; the others miss it
            log.exception("could not send %d event(s) to the other processes", len(frames))

    # -- receiving ------------------------------------------------------------------------

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._inbox.put_nowait(payload)

    async def _receiver(self) -> None:
        while True:
            payload = await self._inbox.get()
            try:
                message = json.loads(payload)
                if message.get("o") == self.origin:
                    continue
                if "ref" in message:  # sent by reference: read it before the next one
                    text = await self._listen.fetchval(
                        "SELECT payload FROM braid_events WHERE id = $1", message["ref"])
                    if text is None:
                        continue
                    message = json.loads(text)
            except Exception:  # noqa: BLE001 - one bad notification must not stop the rest
                log.exception("could not read an event from another process")
                continue
            for frame in message.get("f", ()):
                self._take(frame)

    def _take(self, frame: EventFrame) -> None:  # JSON from another process of ours
        try:
            if self.on_remote is not None:
                self.on_remote(frame)
        except Exception:  # noqa: BLE001 - the tabs get the event all the same
            log.exception("could not follow an event of another process")
        self._deliver(frame)

    async def prune(self) -> None:
        """Rows sent by reference, once every listener has long read them."""
        async with self._send_lock:
            await self._send.execute(
                f"DELETE FROM braid_events WHERE created_at < now() - interval '{KEEP_EVENTS}'")
