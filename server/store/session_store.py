"""`SessionStore`: creates, opens and lists session repositories, each with its lane.

All git work of a session runs in order, one item at a time, in that session's lane
(`pools.SerialLane`) on a pool of a few threads shared by all sessions: the lane is both the
per-session write lock and the rule that a repository is never used by two threads at once."""

from __future__ import annotations

import asyncio
import shutil
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from server.base.errors import NotFound
from server.base.fsops import sync_dir, sync_tree
from server.base.ids import is_session_id, new_session_id
from server.base.names import plain_title
from server.base.pools import IdlingThreadPool, SerialLane
from server.base.records import SessionMeta, new_session_meta
from server.git.session import GitSession
from server.store import session_settings

T = TypeVar("T")
# The threads all sessions' git work shares; each thread goes once idle for IDLE_SECONDS.
GIT_THREADS = 8
IDLE_SECONDS = 5.0
GIT_POOL = IdlingThreadPool(GIT_THREADS, IDLE_SECONDS, name="braid-git")


class SessionHandle:
    """A live session: its metadata and the lane its git work runs in."""

    def __init__(self, session_id: str, path: Path,
                 on_use: Callable[[SessionHandle], None] = lambda _: None) -> None:
        self.session_id = session_id
        self.path = path
        self._on_use = on_use  # the store keeps a handle in use (see `SessionStore`)
        self._lane = SerialLane(GIT_POOL)
        # Opened on demand and given back when idle (`release`): a thousand sessions once
        # looked at must not keep a thousand repositories and watchers open (D14). Only
        # the lane touches `_git`; `_open` is the loop's view of it.
        self._git: GitSession | None = None
        self._open = False
        self._pending = 0
        self.last_used = time.monotonic()
        # session.json under the session's own settings (not an old branch's copy)
        self.meta: SessionMeta = session_settings.load(path)

    @property
    def user_id(self) -> str:
        return str(self.meta.get("user_id", ""))

    def _git_here(self) -> GitSession:
        if self._git is None:
            self._git = GitSession(self.path, watch=True)
        return self._git

    def _close_git(self) -> None:
        git, self._git = self._git, None
        if git is not None:
            _let_go(git)

    @property
    def is_open(self) -> bool:
        return self._open

    async def call(self, fn: Callable[[GitSession], T]) -> T:
        """Run `fn(git)` in this session's lane, after any work queued before it."""
        if not self._open:
            self._on_use(self)
        self._open = True
        self._pending += 1
        try:
            return await asyncio.wrap_future(self._lane.submit(lambda: fn(self._git_here())))
        finally:
            self._pending -= 1
            self.last_used = time.monotonic()

    def release(self) -> Future[None] | None:
        """Give back the repository (files, watcher) of an idle session; the next `call`
        opens it again. Runs on the event loop, like `call`, so no call is in flight.
        Returns the closing's future (None: the session was not released)."""
        if not self._open or self._pending:
            return None
        self._open = False
        return self._lane.submit(self._close_git)

    def close(self) -> None:
        """Close the repository once the work queued before is done (blocks: off the loop,
        or at shutdown)."""
        self._open = False
        self._lane.submit(self._close_git).result()


def _let_go(git: GitSession) -> None:
    """Close a repository no one will use again: the deferred index entries first, then its
    C side (object cache, pack windows, odb and refdb handles) at once. A
    `pygit2.Repository` sits in a reference cycle (its `branches`, `references`... point
    back at it), so only the cyclic GC would drop it, much later."""
    git.index.flush()
    git.close()
    git.repo.free()


class SessionStore:
    """The session folders under `root`, and a handle for each one in use.

    A handle is held here while it is in use: from a lookup or its first `call` until the
    reaper finds it idle (`release_idle`). After that only whoever still holds it (a socket,
    a run) keeps it, and `get` gives them the same handle, so a session never has two lanes.
    A handle nobody holds is dropped: a burst of sessions opened once leaves nothing behind
    (no metadata, lane or path per session ever seen), and nothing made mid-burst pins
    the heap after it (issue 11)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        sync_dir(self.root)  # once a start: the folder's name (and its parents') kept
        sync_dir(self.root.parent)
        self._handles: dict[str, SessionHandle] = {}  # in use: held until released
        self._known: weakref.WeakValueDictionary[str, SessionHandle] = \
            weakref.WeakValueDictionary()  # every handle someone holds
        self._deleted: set[str] = set()  # being deleted: no new handle may open them

    def path(self, session_id: str) -> Path:
        return self.root / session_id

    def all_ids(self) -> list[str]:
        return sorted(
            p.name for p in self.root.iterdir()
            if is_session_id(p.name) and (p / "session.json").exists()
        )

    def get(self, session_id: str) -> SessionHandle:
        # Any string is looked up (the transports parsed it); one that cannot be a session
        # id names nothing and never reaches the file system.
        if not is_session_id(session_id):
            raise NotFound(f"no session {session_id!r}")
        handle = self._known.get(session_id)
        if handle is None:
            if session_id in self._deleted:
                raise NotFound(f"no session {session_id}")
            path = self.path(session_id)
            if not (path / "session.json").exists():
                raise NotFound(f"no session {session_id}")
            handle = SessionHandle(session_id, path, self._in_use)
            self._known[session_id] = handle
        elif session_id not in self._handles:
            handle.last_used = time.monotonic()
        self._handles[session_id] = handle
        return handle

    def _in_use(self, handle: SessionHandle) -> None:
        if self._known.get(handle.session_id) is handle:  # not forgotten (deleted) meanwhile
            self._handles[handle.session_id] = handle

    def get_owned(self, user_id: str, session_id: str) -> SessionHandle:
        """The session if `user_id` owns it. Another user's session is `NotFound`, so its
        existence is not revealed."""
        handle = self.get(session_id)
        if handle.user_id != user_id:
            raise NotFound(f"no session {session_id}")
        return handle

    async def create(
        self,
        user_id: str,
        title: str = "",
        *,
        forked_from_session_id: str | None = None,
        root_session_id: str | None = None,
        model: str | None = None,
        build: Callable[[Path, SessionMeta], object] = GitSession.create,
    ) -> SessionHandle:
        """A new session folder made by `build(path, meta)` (an import writes its own first
        commit); if `build` fails, nothing of the folder is left."""
        session_id = new_session_id()
        meta = new_session_meta(session_id, plain_title(title), user_id,
                                forked_from_session_id=forked_from_session_id,
                                root_session_id=root_session_id)
        if model is not None:  # an import's choice
            meta["model"] = model
        path = self.path(session_id)
        loop = asyncio.get_running_loop()
        try:
            made = await loop.run_in_executor(None, build, path, meta)
            # Whole on disk before anyone is told it exists (DESIGN "Durability").
            await loop.run_in_executor(None, sync_tree, path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        if isinstance(made, GitSession):  # the lane opens its own: this one goes now
            await loop.run_in_executor(None, _let_go, made)
        return self.get(session_id)

    def release_idle(self, idle_seconds: float, max_open: int,
                     keep: frozenset[str] = frozenset()) -> list[Future[None]]:
        """Release sessions idle for `idle_seconds`, and the least recently used idle ones
        beyond `max_open` open at once. Returns the closings' futures, one per session.
        Handles looked up but never opened are let go after `idle_seconds` too."""
        now = time.monotonic()
        opened = sorted((h for h in self._handles.values()
                         if h.is_open and h.session_id not in keep),
                        key=lambda h: h.last_used)
        closing = []
        for i, handle in enumerate(opened):
            over = len(opened) - i > max_open
            if over or now - handle.last_used >= idle_seconds:
                future = handle.release()
                if future is not None:
                    closing.append(future)
                    del self._handles[handle.session_id]
        for sid, handle in list(self._handles.items()):
            if not handle.is_open and sid not in keep \
                    and now - handle.last_used >= idle_seconds:
                del self._handles[sid]
        return closing

    def open_count(self) -> int:
        """How many sessions have their repository open (or opening)."""
        return sum(1 for h in self._handles.values() if h.is_open)

    def forget(self, session_id: str) -> None:
        """Drop a session's handle (it is being deleted); later lookups are `NotFound`."""
        self._handles.pop(session_id, None)
        self._known.pop(session_id, None)
        self._deleted.add(session_id)

    def close(self) -> None:
        for handle in list(self._known.values()):
            handle.close()
        self._handles.clear()
