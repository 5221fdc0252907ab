"""The events of DESIGN §5, each made by one constructor below and published by type, and
`EventBus`, which hands them to every subscriber of their session (two tabs stay in sync).

An event is an `Event[Literal[name]]`: its name as a Literal (`results.EventName` lists them
all) and its payload, the `data` of the frame `{type: "event", event, data: {session_id, ...}}`
the transports send. A constructor's parameters are the keys its event sends, so a key cannot
be forgotten or misspelt; `web/render/event_table.py` says how each event reaches a page (HTML)
and a script (JSON), one row an event (tests/web/test_event_table.py: every event has one).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Generic, Literal, TypedDict, TypeVar, cast, get_args

from server.base.records import (
    FileChip,
    MessageRecord,
    RewindPoint,
    RunRecord,
    RunRow,
    Siblings,
    Skipped,
    ToolCall,
    Usage,
)
from server.base.results import (
    Conflicted,
    EventData,
    EventFrame,
    EventName,
    QueuedMessage,
    SubAgentResult,
    SubAgentSummary,
    WaitingCall,
)

EVENTS: frozenset[str] = frozenset(get_args(EventName))
N = TypeVar("N", bound=EventName, covariant=True)


@dataclass(frozen=True, slots=True)
class Event(Generic[N]):
    """One event: its name (a Literal per event) and its payload (without `session_id`,
    added on publishing)."""

    name: N
    data: EventData

    def frame(self, session_id: str) -> EventFrame:
        return {"type": "event", "event": self.name, "data": {"session_id": session_id,
                                                               **self.data}}


AnyEvent = Event[EventName]


def _tagged(data: EventData, branch: str | None) -> EventData:
    """A sub-agent's run events carry its branch (the page's live cards and lanes)."""
    if branch is not None:
        data["branch"] = branch
    return data


# -- a turn (agent/turns.py) -----------------------------------------------------------------


def run_started(run_id: str, run: RunRecord, branch: str, messages: list[MessageRecord],
                siblings: Siblings | None, titled: bool) -> Event[Literal["run_started"]]:
    """`titled`: the first turn named the session (the sidebar is redrawn only then)."""
    return Event("run_started", {"run_id": run_id, "run": run, "branch": branch,
                                 "messages": messages, "siblings": siblings, "titled": titled})


def message_delta(run_id: str, message_id: str, delta: str, *, branch: str | None = None
                  ) -> Event[Literal["message_delta"]]:
    return Event("message_delta", _tagged({"run_id": run_id, "message_id": message_id,
                                           "delta": delta}, branch))


def tool_call(run_id: str, call: ToolCall, message_id: str, *, branch: str | None = None
              ) -> Event[Literal["tool_call"]]:
    return Event("tool_call", _tagged({"run_id": run_id, "call": call,
                                       "message_id": message_id}, branch))


def tool_result(run_id: str, message: MessageRecord, *, branch: str | None = None
                ) -> Event[Literal["tool_result"]]:
    return Event("tool_result", _tagged({"run_id": run_id, "message": message}, branch))


def tool_output(run_id: str, call_id: str, text: str, *, branch: str | None = None
                ) -> Event[Literal["tool_output"]]:
    """A command's output as it comes (DESIGN §4 "The shell")."""
    return Event("tool_output", _tagged({"run_id": run_id, "call_id": call_id, "text": text},
                                        branch))


def checkpoint(run_id: str, commit_id: str, kind: str, *,
               skipped: list[Skipped] | None = None) -> Event[Literal["checkpoint"]]:
    """One checkpoint commit; `skipped`: the names a turn's commit left out."""
    data: EventData = {"run_id": run_id, "commit_id": commit_id, "kind": kind}
    if skipped:
        data["skipped"] = skipped
    return Event("checkpoint", data)


RunEnd = Literal["run_completed", "run_error", "run_cancelled"]


def run_ended(status: str, run_id: str, run: RunRecord | RunRow, messages: list[MessageRecord],
              *, files: list[FileChip] | None = None, siblings: Siblings | None = None,
              branch: str | None = None, error: str | None = None,
              reason: str | None = None) -> Event[RunEnd]:
    """A run's end, named by its status: `run_completed`, `run_error` (with its `error`) or
    `run_cancelled` (stopped, interrupted; `reason` when another process's run was)."""
    name: RunEnd = {"COMPLETED": "run_completed", "ERROR": "run_error"}.get(  # type: ignore[assignment]
        status, "run_cancelled")
    data: EventData = _tagged({"run_id": run_id, "run": run, "status": status,
                               "messages": messages, "files": files or [],
                               "siblings": siblings}, branch)
    if error:
        data["error"] = error
    if reason:
        data["reason"] = reason
    return Event(name, data)


def run_continued(run_id: str, branch: str, head: str, forked: bool, source_run_id: str,
                  message_index: int) -> Event[Literal["run_continued"]]:
    return Event("run_continued", {"run_id": run_id, "branch": branch, "head": head,
                                   "forked": forked, "source_run_id": source_run_id,
                                   "message_index": message_index})


def approval_needed(waiting: WaitingCall) -> Event[Literal["approval_needed"]]:
    data: EventData = {"run_id": waiting["run_id"], "call_id": waiting["call_id"],
                       "tool": waiting["tool"], "args": waiting["args"],
                       "shown_in": waiting["shown_in"], "branch": waiting["branch"]}
    if "diff" in waiting:
        data["diff"] = waiting["diff"]
    if "label" in waiting:
        data["label"] = waiting["label"]
    return Event("approval_needed", data)


def approval_resolved(waiting: WaitingCall, decision: str, reason: str
                      ) -> Event[Literal["approval_resolved"]]:
    return Event("approval_resolved", {
        "run_id": waiting["run_id"], "call_id": waiting["call_id"], "tool": waiting["tool"],
        "decision": decision, "reason": reason, "shown_in": waiting["shown_in"]})


# -- the history (features/) -----------------------------------------------------------------


def dag_changed(*, run_id: str | None = None, branch: str | None = None
                ) -> Event[Literal["dag_changed"]]:
    """The history panel is stale: the run or the branch that changed it."""
    data: EventData = {}
    if run_id is not None:
        data["run_id"] = run_id
    if branch is not None:
        data["branch"] = branch
    return Event("dag_changed", data)


class Reverted(TypedDict):
    """What `reverted` tells of a revert, an unrevert or a files-only rewind."""

    turn_id: str
    run_id: str
    commit_id: str
    restored_paths: list[str]
    conflicts: list[Conflicted]
    reverted: bool
    note: MessageRecord
    files: list[FileChip]
    branch: str


def reverted(what: Reverted, *, run: RunRecord | None = None,
             rewind: RewindPoint | None = None) -> Event[Literal["reverted"]]:
    data: EventData = {
        "turn_id": what["turn_id"], "run_id": what["run_id"], "commit_id": what["commit_id"],
        "restored_paths": what["restored_paths"], "conflicts": what["conflicts"],
        "reverted": what["reverted"], "note": what["note"], "files": what["files"],
        "branch": what["branch"]}
    if run is not None:
        data["run"] = run
    if rewind is not None:
        data["rewind"] = rewind
    return Event("reverted", data)


def merged(run_id: str, commit_id: str, parent_ids: list[str], branches: list[str],
           strategy: str, *, conflicts: list[Conflicted] | None = None,
           paths: list[str] | None = None) -> Event[Literal["merged"]]:
    """A merge commit: the user's (`conflicts`, as resolved) or the model's (`paths`)."""
    data: EventData = {"run_id": run_id, "commit_id": commit_id, "parent_ids": parent_ids,
                       "branches": branches, "strategy": strategy}
    if conflicts is not None:
        data["conflicts"] = conflicts
    if paths is not None:
        data["paths"] = paths
    return Event("merged", data)


class ModelSpawn(TypedDict):
    """A child the model spawned (agent/orchestrate.py): its parent's run and tool call."""

    parent_run_id: str | None
    call_id: str | None
    depth: int | None
    resumed: bool


def sub_agent_started(run_id: str, branch: str, label: str, prompt: str,
                      parent_turn_id: str, parent_branch: str, *,
                      spawn: ModelSpawn | None = None
                      ) -> Event[Literal["sub_agent_started"]]:
    data: EventData = {"run_id": run_id, "branch": branch, "label": label, "prompt": prompt,
                       "parent_turn_id": parent_turn_id, "parent_branch": parent_branch}
    if spawn is not None:
        data["parent_run_id"], data["call_id"] = spawn["parent_run_id"], spawn["call_id"]
        data["depth"], data["resumed"] = spawn["depth"], spawn["resumed"]
    return Event("sub_agent_started", data)


class SubAgentShown(TypedDict):
    """A user-spawned child's result written on the parent branch, and the branch shown."""

    summary: SubAgentSummary
    shown_branch: str


def sub_agent_done(end: SubAgentResult, *, shown: SubAgentShown | None = None,
                   spawn: ModelSpawn | None = None, usage: Usage | None = None
                   ) -> Event[Literal["sub_agent_done"]]:
    """A user-spawned child's end comes with its summary (`shown`), a model's child's with
    its parent's call (`spawn`, without `resumed`) and its tokens."""
    data: EventData = {
        "branch": end["branch"], "label": end["label"], "run_id": end["run_id"],
        "status": end["status"], "final_text": end["final_text"], "error": end["error"],
        "commit_id": end["commit_id"], "parent_branch": end["parent_branch"],
        "parent_turn_id": end["parent_turn_id"], "files": end.get("files") or []}
    if shown is not None:
        summary = shown["summary"]
        data["summary_run_id"], data["summary_commit_id"] = summary["run_id"], summary["commit_id"]
        data["summary"], data["shown_branch"] = summary, shown["shown_branch"]
    if spawn is not None:
        data["parent_run_id"], data["call_id"] = spawn["parent_run_id"], spawn["call_id"]
    if usage is not None:
        data["usage"] = usage
    return Event("sub_agent_done", data)


# -- the session (features/) -----------------------------------------------------------------


def session_changed(branch: str, head: str) -> Event[Literal["session_changed"]]:
    """The branch shown moved (a checkout, an update from source): the page redraws."""
    return Event("session_changed", {"branch": branch, "head": head})


def session_updated(changes: list[str]) -> Event[Literal["session_updated"]]:
    return Event("session_updated", {"changes": changes})


def session_deleted() -> Event[Literal["session_deleted"]]:
    return Event("session_deleted", {})


def files_uploaded(run_id: str, run: RunRecord, messages: list[MessageRecord], paths: list[str],
                   commit_id: str, files: list[FileChip]) -> Event[Literal["files_uploaded"]]:
    return Event("files_uploaded", {"run_id": run_id, "run": run, "messages": messages,
                                    "paths": paths, "commit_id": commit_id, "files": files})


def queue_changed(change: str, queued_id: str, queued: list[QueuedMessage], ids: list[str]
                  ) -> Event[Literal["queue_changed"]]:
    """What changed in the queue (`change`: added, updated, removed or started; the message
    added or edited in `queued`, its text cut short) and the ids waiting now, in order."""
    return Event("queue_changed", {"change": change, "queued_id": queued_id, "queued": queued,
                                   "ids": ids})


# Frames one subscriber may leave unread. Past that it has fallen behind (a socket whose
# client does not read): its frames are dropped, it is unsubscribed and handed one
# `fell_behind` frame, and its transport closes it (the page reconnects and catches up).
# Without the bound, a socket that never read held every frame: 80 queued messages of
# 100 KB took a server from 90 to 489 MB (issue 34).
MAX_UNREAD = 2048
# Not an event of §5 (never sent, no constructor, no rendering): the transport's signal.
FELL_BEHIND = cast(EventFrame, {"type": "event", "event": "fell_behind", "data": {}})


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

    def publish(self, session_id: str, event: AnyEvent) -> EventFrame:
        """The event's frame to every subscriber of the session; the frame, for a team's bus
        to send to the other processes too."""
        frame = event.frame(session_id)
        self.deliver(session_id, frame)
        return frame

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
