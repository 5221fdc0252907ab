"""The run registry of a team server: this process's runs, and the runs of the other
processes as they are seen from this one (branch locks across processes: pg_locks.py).

- Runs other processes drive are followed from their events (`observe`) as `RemoteRun`s: a
  page here shows them live (the user's message and the text streaming now), `Busy` checks
  of the session count them, and stopping one sends the cancel to its process. `all()` is
  this process's own runs only: a shutdown stops those, never the others'."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from server.agent.live_runs import ActiveRun, RunRegistry
from server.base.records import MessageRecord, RunRecord, RunRow
from server.base.results import EventFrame, WaitingCall

log = logging.getLogger("braid.pg")
ENDS = ("run_completed", "run_error", "run_cancelled")


@dataclass
class RemoteTurn:
    """What a page needs of a turn another process drives (`live.snapshot` reads it)."""

    run: RunRecord | RunRow
    messages: list[MessageRecord]
    pending: dict[str, bytes] = field(default_factory=dict)  # never committed here

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


@dataclass
class RemoteRun(ActiveRun):
    # Asks the process driving the run to stop it (`pg_team.Team.send_cancel`).
    send_cancel: Callable[[str, str], None] | None = None
    followed_at: float = field(default_factory=time.monotonic)

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.stop_requested = True
        if self.send_cancel is not None and reason == "cancel":
            self.send_cancel(self.session_id, self.run_id)


class PgRunRegistry(RunRegistry):
    def __init__(self, send_cancel: Callable[[str, str], None]) -> None:
        super().__init__()
        self.send_cancel = send_cancel
        self._remote: dict[tuple[str, str], RemoteRun] = {}

    # -- the other processes' runs --------------------------------------------------------

    def for_session(self, session_id: str) -> list[ActiveRun]:
        remote = [r for (sid, _), r in self._remote.items() if sid == session_id]
        return super().for_session(session_id) + remote

    def remote_branches(self, session_id: str) -> set[str]:
        """The session's branches another live process drives a run on."""
        return {branch for (sid, branch) in self._remote if sid == session_id}

    def local(self, session_id: str, run_id: str) -> ActiveRun | None:
        return next((a for a in super().for_session(session_id) if a.run_id == run_id), None)

    def observe(self, frame: EventFrame) -> None:
        """Follow a frame another process published."""
        data = frame.get("data") or {}
        event, sid, run_id = frame.get("event"), data.get("session_id"), data.get("run_id")
        if not isinstance(sid, str) or not isinstance(run_id, str):
            return
        if event == "run_started" and isinstance(data.get("branch"), str):
            run = RemoteRun(sid, run_id, data["branch"], send_cancel=self.send_cancel, started=True)
            # A frame without its run (none is sent so) still names the run.
            turn = RemoteTurn((data.get("run") or cast(RunRow, {"run_id": run_id})).copy(),
                              list(data.get("messages") or []))
            run.ctx = turn  # what live.snapshot reads
            self._remote[(sid, data["branch"])] = run
            return
        remote = next((r for (s, _), r in self._remote.items()
                       if s == sid and r.run_id == run_id), None)
        if remote is None:
            return
        if event == "message_delta":
            remote.partial += str(data.get("delta") or "")
        elif event == "tool_call":
            remote.partial = ""  # the text so far became a message with tool calls
        elif event == "approval_needed" and isinstance(call_id := data.get("call_id"), str):
            remote.waiting[call_id] = cast(WaitingCall, {
                k: v for k, v in data.items() if k != "session_id"})
        elif event == "approval_resolved":
            remote.waiting.pop(str(data.get("call_id")), None)
        elif event in ENDS:
            self.forget(remote)

    def forget(self, remote: ActiveRun) -> None:
        if self._remote.get((remote.session_id, remote.branch)) is remote:
            del self._remote[(remote.session_id, remote.branch)]
        remote.done.set()

    def reconcile(self, live: set[tuple[str, str]], asof: float) -> None:
        """Drop followed runs whose branch no live process held at `asof` (an end event
        missed while the listening connection was down, or a process gone); runs first
        seen since are newer than that answer."""
        for key, remote in list(self._remote.items()):
            if key not in live and remote.followed_at < asof:
                self.forget(remote)
