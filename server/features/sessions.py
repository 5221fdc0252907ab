"""Session-level core functions: create, list, describe, read runs and the transcript, check
out a branch, and the commit graph. Each is one call for the transports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pygit2

from server.agent import approvals, network
from server.agent.turn_changes import annotate_turns
from server.agent.turn_context import snapshot_user_edits
from server.base import events
from server.base.errors import Busy, NotFound
from server.base.records import MessageRecord, RunRecord, RunRow, SessionRow
from server.base.results import (
    CreatedSession,
    RunSummary,
    RunSummaryRow,
    SessionInfo,
    ShownBranch,
    Transcript,
    TranscriptItem,
)
from server.features.revert import standing_rewinds
from server.git.session import GitSession
from server.store import atomic, layout
from server.store.layout import run_entries
from server.store.lineage import attach_siblings

PAGE_TURNS = 30  # the transcript shows the newest turns; older ones load on scroll-up

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.features.sources.sources import SourceRequest
    from server.store.session_store import SessionHandle



async def create_session(braid: Services, user_id: str, title: str = "",
                         source: SourceRequest | None = None,
                         model: str | None = None) -> CreatedSession:
    """A new empty session, or (`source`) one imported from the user's project."""
    if source is not None or model is not None:
        from server.features.sources.importing import (
            import_session,  # a session from the user's project
        )

        return await import_session(braid, user_id, source, title, model)
    handle = await braid.store.create(user_id, title)
    await braid.index.upsert_session(handle.meta)
    return {"session_id": handle.session_id, "title": handle.meta["title"]}


async def list_sessions(braid: Services, user_id: str, query: str = "",
                        archived: bool = False) -> list[SessionRow]:
    """Newest first; archived sessions are listed only when asked for (and then only they)."""
    return await braid.index.list_sessions(user_id, query.strip()[:100], archived)


def _describe(git: GitSession, handle: SessionHandle) -> SessionInfo:
    branches = git.branches()
    return {
        "session_id": handle.session_id,
        "title": handle.meta.get("title", ""),
        "user_id": handle.user_id,
        "archived": bool(handle.meta.get("archived")),
        "model": handle.meta.get("model"),
        "forked_from_session_id": handle.meta.get("forked_from_session_id"),
        "root_session_id": handle.meta.get("root_session_id"),
        "created_at": handle.meta.get("created_at"),
        "head": str(git.head_oid()),
        "branch": git.branch,
        "branches": [{"name": n, "head": h} for n, h in sorted(branches.items())],
        # An imported session's source and import summary (skipped files), if any.
        "source": handle.meta.get("source"),
        "import": handle.meta.get("import"),
        "approvals": approvals.mode_of(handle.meta),
        "approvals_always": list(handle.meta.get("approvals_always") or ()),
        "tools_off": list(handle.meta.get("tools_off") or ()),
        "shell_network": network.mode_of(handle.meta),
        "shell_network_hosts": network.allowed_hosts(handle.meta),
    }


async def session_info(braid: Services, user_id: str, session_id: str, *,
                       runs: bool = True) -> SessionInfo:
    """`GET /api/sessions/{id}`; the page asks without `runs` (every run of the session:
    its transcript shows the newest turns only)."""
    handle = braid.store.get_owned(user_id, session_id)
    info = await handle.call(lambda git: _describe(git, handle))
    if runs:
        info["runs"] = [_run_row(r) for r in await braid.index.list_runs(handle.session_id)]
    live = {a.branch: a.run_id for a in braid.runs.for_session(handle.session_id)}
    info["running"] = live
    from server.features.model_choice import current

    now = current(braid, handle)
    # `model` is the session's choice (None: the default); this is what its turns use.
    info["model_in_use"], info["endpoint"] = now["ref"], now["endpoint"]
    return info


def _run_row(run: RunRow) -> RunSummaryRow:
    return {"run_id": run["run_id"], "status": run["status"], "branch": run["branch"],
            "forked_from_run_id": run["forked_from_run_id"],
            "forked_from_message_index": run["forked_from_message_index"],
            "regenerated_from": run["regenerated_from"], "created_at": run["created_at"]}


def read_run(git: GitSession, run_id: str) -> RunRecord:
    """A run's record and messages as the branch it lives on holds them."""
    commit = git.head_commit()
    path = layout.find_run_path(git, run_id, commit)
    if path is None:
        for tip in git.branches().values():
            candidate = git.commit(tip)
            path = layout.find_run_path(git, run_id, candidate)
            if path is not None:
                record = git.read_json(candidate, path)
                if record.get("branch") in git.branches():
                    commit = git.commit(git.branch_tip(record["branch"]))
                    path = layout.find_run_path(git, run_id, commit) or path
                else:
                    commit = candidate
                break
    if path is None:
        raise NotFound(f"no run {run_id}")
    run: RunRecord = git.read_json(commit, path).copy()
    run["messages"] = [e.message.copy() for e in run_entries(git, commit, run_id)]
    return run


async def get_run(braid: Services, user_id: str, session_id: str, run_id: str) -> RunRecord:
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: read_run(git, run_id))


def build_turns(messages: Sequence[MessageRecord],
                runs: Mapping[str, RunRecord | RunRow | RunSummary]) -> list[TranscriptItem]:
    """Group a branch's messages into what the page shows: turns (a user message and the
    answer's messages) and notes (system messages such as revert notices)."""
    items: list[TranscriptItem] = []
    current: TranscriptItem | None = None
    for msg in messages:
        if msg["role"] == "system":
            items.append({"type": "note", "message": msg})
            current = None
            continue
        run_id = msg.get("run_id")
        # One item per run: a continued run can hold several user messages (they go in its
        # parts, in order), and each run's turn has one DOM id.
        if current is None or current["run_id"] != run_id:
            current = {"type": "turn", "run_id": run_id, "user": None, "parts": [],
                       "run": runs.get(run_id or "", {})}
            items.append(current)
        if msg["role"] == "user" and current["user"] is None:
            current["user"] = msg
        else:
            current["parts"].append(msg)
    return items


def page_start(messages: Sequence[MessageRecord], end: int, limit: int) -> int:
    """Where the newest `limit` items (turns and notes, as `build_turns` groups them) before
    message `end` begin. Walks back from `end` only, so a page costs what it shows."""
    items = 0
    current: object = _START
    i = end
    while i > 0:
        msg = messages[i - 1]
        if msg["role"] == "system":
            new, current = True, _NOTE
        else:
            new = current in (_START, _NOTE) or msg.get("run_id") != current
            current = msg.get("run_id")
        if new:
            if items == limit:
                break
            items += 1
        i -= 1
    return i


_START, _NOTE = object(), object()


def transcript_at(git: GitSession, commit: pygit2.Commit | None = None, *,
                  limit: int | None = PAGE_TURNS, before: int | None = None,
                  down_to: str | None = None) -> Transcript:
    """The newest `limit` turns of the branch at `commit` (all when None) before its message
    `before` (the end when None): the page shows these and loads older ones on scroll.
    `down_to`: a run whose turn is shown too, however far back (a search result's)."""
    commit = commit or git.head_commit()
    messages = layout.messages(git, commit)
    end = len(messages) if before is None else min(before, len(messages))
    start = page_start(messages, end, limit) if limit is not None else 0
    if down_to is not None:
        start = next((i for i, m in enumerate(messages[:start]) if m.get("run_id") == down_to),
                     start)
    shown = messages[start:end]
    runs = layout.run_records(git, {str(m["run_id"]) for m in shown if m.get("run_id")}, commit)
    items = build_turns(shown, runs)
    annotate_turns(git, commit, items)  # each turn's file chips, all in one walk
    return {"commit_id": str(commit.id), "turns": items, "start": start, "has_more": start > 0,
            "total": len(messages), "rewinds": standing_rewinds(messages[start:])}


async def transcript(braid: Services, user_id: str, session_id: str, *,
                     before: int | None = None, commit: str | None = None,
                     down_to: str | None = None) -> Transcript:
    """The page's transcript: the newest turns of the branch shown, or (`before`, `commit`)
    the ones before message `before` of that commit's branch (down to run `down_to`'s)."""
    handle = braid.store.get_owned(user_id, session_id)
    at, rev = before, commit

    def work(git: GitSession) -> Transcript:
        return transcript_at(git, git.commit(rev) if rev else None, before=at, down_to=down_to)

    view = await handle.call(work)
    view["session_id"] = handle.session_id
    # The `‹ 2/3 ›` switcher: which turns have sibling runs (forks) and where they live.
    attach_siblings(view["turns"], await braid.index.lineage_runs(handle.session_id))
    return view


async def note(braid: Services, user_id: str, session_id: str, message_id: str
               ) -> MessageRecord:
    """A note of the branch shown (a compaction's summary, say), by its message id: the page
    draws a summary folded and fetches its text when it is opened (issue 30: a summary is up
    to a quarter of the context window, drawn on every load)."""
    handle = braid.store.get_owned(user_id, session_id)

    def work(git: GitSession) -> MessageRecord | None:
        return next((m for m in reversed(layout.messages(git))
                     if m["role"] == "system" and m["id"] == message_id), None)

    found = await handle.call(work)
    if found is None:
        raise NotFound("no such note on the branch shown")
    return found


async def current_branch(braid: Services, user_id: str, session_id: str) -> str:
    """The branch the session shows now (its HEAD)."""
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: git.branch)


async def checkout(braid: Services, user_id: str, session_id: str, ref: str) -> ShownBranch:
    """Show another branch: its files in workdir/ and its transcript. The user's unsaved
    edits are committed on the branch they were made on first, so nothing is lost."""
    handle = braid.store.get_owned(user_id, session_id)
    if await braid.locks.held(handle.session_id):
        raise Busy("a run is going on in this session")

    def work(git: GitSession) -> ShownBranch:
        git.branch_tip(ref)
        snapshot_user_edits(git)
        atomic.checkout(git, ref)
        return {"branch": git.branch, "head": str(git.head_oid())}

    result = await handle.call(work)
    braid.bus.publish(handle.session_id, events.session_changed(result["branch"], result["head"]))
    return result


__all__ = [
    "build_turns",
    "checkout",
    "create_session",
    "get_run",
    "list_sessions",
    "note",
    "read_run",
    "session_info",
    "transcript",
    "transcript_at",
]
