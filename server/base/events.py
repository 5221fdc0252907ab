"""`EventBus`: events of a session go to every subscriber of that session (two tabs stay in
sync). Core code publishes typed payloads (records.EventData); transports render them."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from server.base.results import EventData, EventFrame

EVENTS = frozenset({
    "run_started", "message_delta", "tool_call", "tool_result", "checkpoint",
    "run_completed", "run_error", "run_cancelled", "reverted", "sub_agent_started",
    "sub_agent_done", "merged", "dag_changed", "session_changed", "run_continued",
    "session_updated", "session_deleted", "files_uploaded", "approval_needed",
    "approval_resolved", "queue_changed", "tool_output",
})


class EventBus:
    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[EventFrame]]] = defaultdict(set)

    def subscribe(self, session_id: str) -> asyncio.Queue[EventFrame]:
        queue: asyncio.Queue[EventFrame] = asyncio.Queue()
        self._subscribers[session_id].add(queue)
        return queue

    def unsubscribe(self, session_id: str, queue: asyncio.Queue[EventFrame]) -> None:
        subs = self._subscribers.get(session_id)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                del self._subscribers[session_id]

    def publish(self, session_id: str, event: str, data: EventData) -> None:
        assert event in EVENTS, event
        frame: EventFrame = {"type": "event", "event": event,
                             "data": {"session_id": session_id, **data}}
        self.deliver(session_id, frame)

    def deliver(self, session_id: str, frame: EventFrame) -> None:
        """Hand a frame to every subscriber of the session (a team's bus: one from another
        process too)."""
        for queue in list(self._subscribers.get(session_id, ())):
            queue.put_nowait(frame)
