"""Thread pools that give their threads back (issue 11, D14).

`IdlingThreadPool`: a pool whose threads go away when there is no work.
`SerialLane`: one session's work, one item at a time in order, on a shared pool: a session's
git work never runs twice at once (its write lock, and pygit2's rule that a repository is
used by one thread at a time) without a thread of its own, so 200 busy sessions use the
pool's few threads instead of 200, and the memory 200 threads' peak leaves behind.

`concurrent.futures.ThreadPoolExecutor` keeps every thread it ever started: a burst of 200
new sessions (their folders are built off the loop) leaves the loop's default executor at its
maximum for the life of the process. This pool starts a thread only when no idle one can take
the work, and a thread that waited `idle_seconds` for work exits, so a server that had a busy
minute is back to the threads it started with once it is quiet.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_STOP = object()


class IdlingThreadPool(ThreadPoolExecutor):
    """A `ThreadPoolExecutor` (asyncio's default executor must be one) with its own
    scheduling: `submit` and `shutdown` are replaced, the base class only holds settings."""

    def __init__(self, max_workers: int = 4, idle_seconds: float = 5.0,
                 name: str = "braid-pool") -> None:
        super().__init__(max_workers, thread_name_prefix=name)
        self._max = max(1, max_workers)
        self._idle_seconds = idle_seconds
        self._name = name
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # `_threads` and `_waiting` (threads blocked on the queue) change under the lock, as
        # do the put and the exit that decide on them: work is never left with no thread.
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._waiting = 0
        self._shut = False
        self._count = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((future, fn, args, kwargs))
            if self._waiting < self._work.qsize() and len(self._threads) < self._max:
                self._count += 1
                thread = threading.Thread(target=self._worker, daemon=True,
                                          name=f"{self._name}_{self._count}")
                self._threads.add(thread)
                thread.start()
        return future

    def _worker(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                self._waiting += 1
            try:
                item = self._work.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    self._waiting -= 1
                    if self._work.empty():  # nothing was put since: this thread is not needed
                        self._threads.discard(me)
                        return
                continue
            with self._lock:
                self._waiting -= 1
            if item is _STOP:
                with self._lock:
                    self._threads.discard(me)
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - handed to the caller's future
                    future.set_exception(e)
            # Not kept while waiting for the next: a bound method would keep its object
            # (a closed session's writer, its last objects) alive as long as this thread.
            item = future = fn = args = kwargs = None

    def threads(self) -> int:
        with self._lock:
            return len(self._threads)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            threads = list(self._threads)
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not _STOP:
                        item[0].cancel()
            for _ in threads:
                self._work.put(_STOP)
        if wait:
            for thread in threads:
                thread.join()



class SerialLane:
    """Runs what is submitted one at a time, in order, on `pool`; holds no thread."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._running = False

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            self._queue.append((future, fn))
            if not self._running:
                self._running = True
                self._pool.submit(self._step)
        return future

    def _step(self) -> None:
        # One item per pool job, then the next is queued behind the other sessions' work:
        # a session with much work does not hold a pool thread from the others.
        with self._lock:
            future, fn = self._queue.popleft()
        try:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the caller's future
                    future.set_exception(e)
        finally:
            with self._lock:
                if self._queue:
                    self._pool.submit(self._step)
                else:
                    self._running = False
