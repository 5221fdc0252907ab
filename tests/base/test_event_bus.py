"""The event bus's bound (base/events.py, issue 34): a subscriber that leaves MAX_UNREAD
frames unread has fallen behind: its frames are dropped, it is let go and handed one
`fell_behind` frame (its socket then closes); subscribers that read get every frame."""

from __future__ import annotations

from server.base import events
from server.base.events import FELL_BEHIND, EventBus


async def test_a_subscriber_that_falls_behind_is_let_go() -> None:
    bus = EventBus(max_unread=3)
    slow = bus.subscribe("s")
    reader = bus.subscribe("s")
    got = []
    for i in range(10):
        bus.publish("s", events.dag_changed(branch=f"b{i}"))
        got.append(reader.get_nowait())
    assert [f["data"]["branch"] for f in got] == [f"b{i}" for i in range(10)]
    # Three frames kept, the fourth let it go: what it held is dropped for one marker.
    assert slow.qsize() == 1 and slow.get_nowait() is FELL_BEHIND
    assert bus.fallen == 1
    bus.publish("s", events.dag_changed(branch="after"))
    assert slow.empty() and reader.get_nowait()["data"]["branch"] == "after"
