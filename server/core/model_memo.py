"""Per-message work kept between a long chat's model calls.

Every model call of a long session sends the same few thousand messages it sent last time
plus one or two new ones (the context budget's window moves by what the turn added). The
token estimate of each message (context.py), its shape for the request (model_messages.py)
and its JSON text (model_body.py) are made once per message and kept here, so a call costs
what is new, not what is sent.

Keyed by the message object itself (its `id()`, with the object kept alive beside the
value, so an id is never reused while its entry lives): message dicts are never changed once
made (layout.messages hands out shared ones: copy to change), and a message read again from
git is a new object, looked at afresh. Used on the event loop only.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

MESSAGES_KEPT = 8192  # a 32k-token window is ~2,300 short messages; a few sessions' worth


class Kept:
    """What is kept of one message: filled in by whoever needs it first."""

    __slots__ = ("encoded", "shaped", "tokens")

    def __init__(self) -> None:
        self.tokens: int | None = None
        self.shaped: dict[bool, dict[str, Any] | None] = {}  # by send_reasoning
        self.encoded: dict[bool, bytes] = {}


class MessageMemo:
    """A `Kept` per message object; the oldest go first when full."""

    def __init__(self, size: int = MESSAGES_KEPT) -> None:
        self.size = size
        self._items: dict[int, tuple[dict[str, Any], Kept]] = {}

    def of(self, msg: dict[str, Any]) -> Kept:
        hit = self._items.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        kept = Kept()
        if len(self._items) >= self.size:
            for key in list(islice(self._items, self.size // 4)):
                del self._items[key]
        self._items[id(msg)] = (msg, kept)
        return kept

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()


MEMO = MessageMemo()
