"""Per-message work kept between a long chat's model calls.

Every model call of a long session sends the same few thousand messages it sent last time
plus one or two new ones (the context budget's window moves by what the turn added). The
token estimate of each message (context.py), its shape for the request (model/messages.py)
and its JSON text (model/body.py) are made once per message and kept here, so a call costs
what is new, not what is sent: the window's kept values are gathered with C-level `map`s.

Keyed by the object itself (its `id()`, with the object kept alive beside the value, so an
id is never reused while its entry lives): message dicts are never changed once made
(layout.messages hands out shared ones: copy to change), and a message read again from git
is a new object, looked at afresh. Used on the event loop only.

Once no session is open any more (all idle and released, store/session_store.py),
`forget_all` empties every memo: what they keep is the released sessions' messages, up to
KEPT of each, which would else stay for good (issue 11: RSS back to the start when the
server is quiet); a session used again makes its values again, once, as after a restart.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, Generic, TypeVar

V = TypeVar("V")
KEPT = 8192  # a 32k-token window is ~2,300 short messages: a few sessions' worth


class IdentityMemo(Generic[V]):
    """A value per object, made on first use; the oldest go first when full."""

    def __init__(self, make: Callable[[Any], V], size: int = KEPT) -> None:
        self.make, self.size = make, size
        self._values: dict[int, V] = {}
        self._objects: dict[int, Any] = {}
        _MEMOS.add(self)

    def get(self, obj: Any) -> V:
        key = id(obj)
        if key in self._values:
            return self._values[key]
        return self._put(key, obj)

    def many(self, objs: Iterable[Any]) -> list[V]:
        """The values of `objs`, in order: C-level passes over the kept ones, a Python
        call only for each new one (a call's fresh prompt, a turn's new messages)."""
        objs = objs if isinstance(objs, list) else list(objs)
        getitem = self._values.__getitem__
        out: list[V] = []
        while True:
            done = len(out)
            try:
                # extend() keeps what it took before a miss: len(out) says where it was.
                out.extend(map(getitem, map(id, objs[done:] if done else objs)))
                return out
            except KeyError:
                out.append(self.get(objs[len(out)]))
                if len(out) == len(objs):
                    return out

    def _put(self, key: int, obj: Any) -> V:
        value = self.make(obj)
        if len(self._values) >= self.size:
            for old in list(islice(self._values, self.size // 4)):
                del self._values[old], self._objects[old]
        self._values[key] = value
        self._objects[key] = obj
        return value

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()
        self._objects.clear()


_MEMOS: weakref.WeakSet[IdentityMemo[Any]] = weakref.WeakSet()
# Other per-message caches keyed by value (functools.lru_cache's cache_clear): emptied too.
_CLEARS: list[Callable[[], None]] = []


def forget_with_memos(clear: Callable[[], None]) -> None:
    """Have `forget_all` call `clear` as well (a module-wide cache of messages' values)."""
    _CLEARS.append(clear)


def forget_all() -> None:
    """Empty every memo (no session is open: what they keep belongs to none)."""
    for memo in list(_MEMOS):
        memo.clear()
    for clear in _CLEARS:
        clear()
