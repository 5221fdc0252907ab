"""One PostgreSQL connection on a thread of its own, callable from synchronous code.

Some callers are synchronous (`Users.authenticate`, `RunRegistry.claim`), and asyncpg is
asynchronous only: the connection lives on a small thread with its own event loop, and a call
waits there for its one short query. Advisory locks live on such a connection: they belong
to it, so they go when the process (and so the connection) dies."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
TIMEOUT = 30.0


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit advisory lock key for a tuple of names."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PgThread:
    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._db: Any = None
        self._lock: asyncio.Lock | None = None

    def run(self, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """`await fn(connection)` on the thread; blocks the caller until it is done."""
        return asyncio.run_coroutine_threadsafe(self._with_db(fn), self._loop).result(TIMEOUT)

    async def arun(self, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """The same from a coroutine, without blocking the caller's event loop."""
        fut = asyncio.run_coroutine_threadsafe(self._with_db(fn), self._loop)
        return await asyncio.wrap_future(fut)

    async def _with_db(self, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        import asyncpg  # only a team server needs it

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one query at a time on one connection
            if self._db is None or self._db.is_closed():  # first use, or the server restarted
                self._db = await asyncpg.connect(self.url)
            return await fn(self._db)

    def close(self) -> None:
        async def shut(db: Any) -> None:
            await db.close()

        if not self._thread.is_alive():
            return
        try:
            if self._db is not None and not self._db.is_closed():
                self.run(shut)
        except Exception:  # noqa: BLE001 - closing: the server may be gone already
            pass
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
