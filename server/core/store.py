"""`SessionStore`: creates, opens and lists session repositories, one worker thread each.

All git work of a session runs on that session's single worker thread, which is both the
per-session write lock and the rule that pygit2 objects never cross threads."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from .errors import NotFound
from .git_session import GitSession
from .ids import is_session_id, new_session_id, now_iso

T = TypeVar("T")


class SessionHandle:
    """A live session: its metadata and the thread its git work runs on."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path
        # Opened on demand and given back when idle (`release`): a thousand sessions once
        # looked at must not keep a thousand threads and repositories open (D14).
        self._executor: ThreadPoolExecutor | None = None
        self._git: GitSession | None = None
        self._draining: Future[None] | None = None
        self._pending = 0
        self.last_used = time.monotonic()
        self.meta: dict[str, Any] = json.loads((path / "session.json").read_text())

    @property
    def user_id(self) -> str:
        return str(self.meta.get("user_id", ""))

    def _git_here(self) -> GitSession:
        draining = self._draining
        if draining is not None:  # the released thread's last flush comes first
            draining.result()
            self._draining = None
        if self._git is None:
            self._git = GitSession(self.path, watch=True)
        return self._git

    @property
    def is_open(self) -> bool:
        return self._executor is not None

    async def call(self, fn: Callable[[GitSession], T]) -> T:
        """Run `fn(git)` on this session's worker thread, after any work queued before it."""
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                1, thread_name_prefix=f"git-{self.session_id[:8]}")
        self._pending += 1
        try:
            return await loop.run_in_executor(self._executor, lambda: fn(self._git_here()))
        finally:
            self._pending -= 1
            self.last_used = time.monotonic()

    def release(self) -> bool:
        """Give back the thread and the repository (files, watcher) of an idle session; the
        next `call` opens them again. Runs on the event loop, like `call`, so no call is in
        flight. The deferred index entries are written first, on the old thread."""
        if self._executor is None or self._pending:
            return False
        executor, git = self._executor, self._git
        self._executor, self._git = None, None

        def finish() -> None:
            if git is not None:
                git.flush_index()
                git.close()

        self._draining = executor.submit(finish)
        executor.shutdown(wait=False)
        return True

    def close(self) -> None:
        if self._executor is None:
            return
        if self._git is not None:
            self._executor.submit(self._git.close)
        self._executor.shutdown(wait=True)
        self._executor = None


class SessionStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._handles: dict[str, SessionHandle] = {}
        self._deleted: set[str] = set()  # being deleted: no new handle may open them
        self._create_lock = asyncio.Lock()

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
        handle = self._handles.get(session_id)
        if handle is None:
            if session_id in self._deleted:
                raise NotFound(f"no session {session_id}")
            path = self.path(session_id)
            if not (path / "session.json").exists():
                raise NotFound(f"no session {session_id}")
            handle = self._handles[session_id] = SessionHandle(session_id, path)
        return handle

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
        extra_meta: dict[str, Any] | None = None,
        build: Callable[[Path, dict[str, Any]], object] = GitSession.create,
    ) -> SessionHandle:
        """A new session folder made by `build(path, meta)` (an import writes its own first
        commit); if `build` fails, nothing of the folder is left."""
        session_id = new_session_id()
        meta = {
            "session_id": session_id,
            "title": title.strip()[:120],
            "user_id": user_id,
            "created_at": now_iso(),
            "forked_from_session_id": forked_from_session_id,
            "root_session_id": root_session_id or session_id,
            **(extra_meta or {}),
        }
        path = self.path(session_id)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, build, path, meta)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return self.get(session_id)

    def release_idle(self, idle_seconds: float, max_open: int,
                     keep: frozenset[str] = frozenset()) -> int:
        """Release sessions idle for `idle_seconds`, and the least recently used idle ones
        beyond `max_open` open at once. Returns how many were released."""
        now = time.monotonic()
        opened = sorted((h for h in self._handles.values()
                         if h.is_open and h.session_id not in keep),
                        key=lambda h: h.last_used)
        released = 0
        for i, handle in enumerate(opened):
            over = len(opened) - i > max_open
            if (over or now - handle.last_used >= idle_seconds) and handle.release():
                released += 1
        return released

    def forget(self, session_id: str) -> None:
        """Drop a session's handle (it is being deleted); later lookups are `NotFound`."""
        self._handles.pop(session_id, None)
        self._deleted.add(session_id)

    def register(self, session_id: str) -> SessionHandle:
        """Open a session folder that another core function created (a fork)."""
        return self.get(session_id)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
