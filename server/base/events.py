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
    "approval_resolved", "queue_changed",
})


# Frames one subscriber may leave unread. Past that it has fallen behind (a socket whose
# client does not read): its frames are dropped, it is unsubscribed and handed one
# `fell_behind` frame, and its transport closes it (the page reconnects and catches up).
# Without the bound, a socket that never read held every frame: 80 queued messages of
# 100 KB took a server from 90 to 489 MB (issue 34).
MAX_UNREAD = 2048
FELL_BEHIND: EventFrame = {"type": "event", "event": "fell_behind", "data": {}}


class EventBus:
    def __init__(self, max_unread: int = MAX_UNREAD) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[EventFrame]]] = defaultdict(set)
        self.max_unread = max_unread
        self.fallen = 0  # subscribers dropped for falling behind, since start

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
        process too); one that has fallen behind is let go instead."""
        for queue in list(self._subscribers.get(session_id, ())):
            if queue.qsize() < self.max_unread:
                queue.put_nowait(frame)
                continue
            self.unsubscribe(session_id, queue)
            self.fallen += 1
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(FELL_BEHIND)
