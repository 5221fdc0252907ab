"""The view model of socket events: what an event's HTML frame needs beyond its payload, read
once per event however many tabs show the session.

The core publishes complete payloads (a finished turn's `files` and `siblings`, the branch a
sub-agent's parent shows...). What is left to read (the names of runs, a redrawn transcript
or graph, the sidebar lists) is read here, once: the bus hands every subscriber of a session
the same frame object, so the view built for the first tab is the one the other tabs render.
The renderers (`render_*.py`, `web/render/dag.py`) are then payload + view -> HTML, with no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from server.agent.orchestrate import SPAWN
from server.base.errors import BraidError
from server.base.records import FileChip, RunRecord, Usage
from server.base.results import (
    ChildCard,
    EventData,
    EventFrame,
    RunSummary,
    Transcript,
    TranscriptItem,
)
from server.features import model_choice, sessions
from server.features.revert import files_of_run
from server.git.branches import is_sub
from server.store import layout
from server.store.lineage import sibling_map
from server.web.render.fragments import EventReads, SessionRowView, View, turn_from_event
from server.web.render.names import names_of
from server.web.render.turn_view import attach_children, card_of_run

if TYPE_CHECKING:
    from server.app.braid import Braid
    from server.git.session import GitSession
    from server.web.specs import ActionContext


Load = Callable[["ActionContext", EventData], Awaitable[EventReads]]


def is_sub_agent_run(data: EventData) -> bool:
    run: Mapping[str, object] = data.get("run") or {}  # a record, or an index row
    return bool(run.get("sub_agent")) or is_sub(str(run.get("branch") or ""))


async def reads_nothing(ctx: ActionContext, data: EventData) -> EventReads:
    return {}


async def reads_run_started(ctx: ActionContext, data: EventData) -> EventReads:
    if is_sub_agent_run(data):
        return {}
    meta = ctx.braid.store.get(ctx.session_id).meta
    out: EventReads = {"title": meta.get("title")}
    if data.get("titled"):  # the first turn names the session: the sidebar is redrawn
        out["sessions"] = await session_rows(ctx)
    return out


async def reads_run_done(ctx: ActionContext, data: EventData) -> EventReads:
    if is_sub_agent_run(data):
        return {}
    out: EventReads = {"usage": await model_choice.session_usage(ctx.braid, ctx.user_id,
                                                                 ctx.session_id),
                       **await reads_instructions(ctx, data)}
    # A turn that spawned sub-agents: its children's tokens (their records) for their cards.
    if not any(m.get("name") == SPAWN for m in data.get("messages") or ()):
        return out
    turn = turn_from_event(data, streaming=False)
    cards = attach_children([turn], live_cards(ctx.braid, ctx.session_id))
    if cards:
        await add_child_usage(ctx.braid, ctx.session_id, cards)
        out["children"] = turn["children"]
    return out


def grows_lane(ctx: ActionContext, data: EventData) -> bool:
    """Whether a `checkpoint` is a sub-agent's (its lane in the graph grew): decided before
    any view is built, so a turn's own checkpoints cost the page nothing."""
    branch = data.get("branch")
    if not branch:
        active = ctx.braid.runs.find(ctx.session_id, str(data.get("run_id") or ""))
        branch = active.branch if active is not None else ""
    return is_sub(branch)


async def reads_instructions(ctx: ActionContext, data: EventData) -> EventReads:
    """The header's instructions chip: what the shown branch holds now (a turn, a revert,
    a checkout or a continue may each have changed its AGENTS.md)."""
    from server.agent.compaction.run import instructions_in_effect

    return {"instructions": await instructions_in_effect(ctx.braid, ctx.user_id,
                                                          ctx.session_id)}


async def _usage(ctx: ActionContext) -> EventReads:
    """The header's token count: the shown branch's, which a checkout or a continue changes."""
    return {"usage": await model_choice.session_usage(ctx.braid, ctx.user_id, ctx.session_id)}


async def reads_transcript(ctx: ActionContext, data: EventData) -> EventReads:
    return {"transcript": await transcript_with_children(ctx.braid, ctx.user_id,
                                                         ctx.session_id), **await _usage(ctx),
            **await reads_instructions(ctx, data)}


async def reads_layout(ctx: ActionContext, data: EventData) -> EventReads:
    from server.web.render.dag import load_layout

    return {"layout": await load_layout(ctx.braid, ctx.user_id, ctx.session_id)}


async def reads_session_changed(ctx: ActionContext, data: EventData) -> EventReads:
    transcript = await transcript_with_children(ctx.braid, ctx.user_id, ctx.session_id)
    return {"transcript": transcript, **await reads_layout(ctx, data), **await _usage(ctx),
            **await reads_instructions(ctx, data)}


async def reads_session_updated(ctx: ActionContext, data: EventData) -> EventReads:
    from server.web.model_actions import picker_html

    out: EventReads = {"info": await sessions.session_info(ctx.braid, ctx.user_id, ctx.session_id,
                                               runs=False),
           "sessions": await session_rows(ctx),
           "archived": await sessions.list_sessions(ctx.braid, ctx.user_id, archived=True)}
    if "model" in (data.get("changes") or ()):
        out["picker"] = await picker_html(ctx.braid, ctx.user_id, ctx.session_id)
    return out


async def reads_queue(ctx: ActionContext, data: EventData) -> EventReads:
    """The queue as it is now: `queue_changed` carries only what changed."""
    from server.features.queue import list_queue

    return {"queue": (await list_queue(ctx.braid, ctx.user_id, ctx.session_id))["queued"]}


async def session_rows(ctx: ActionContext) -> list[SessionRowView]:
    from server.web.render.fragments import order_by_lineage

    return order_by_lineage(await sessions.list_sessions(ctx.braid, ctx.user_id))


async def build(ctx: ActionContext, frame: EventFrame, load: Load) -> View:
    """The event's view: its payload, the session's names, and what `load` (its row of
    frames.RENDERINGS) reads beyond them."""
    data = frame.get("data") or EventData()
    names = await names_of(ctx.braid.index, ctx.session_id)
    reads = await load(ctx, data)
    running = [a.run_id for a in ctx.braid.runs.foreground(ctx.session_id)]
    return View(data=data, names=names, running=running, reads=reads)


class SharedViews:
    """The views of the latest events, by frame (the very object the bus queued for every
    subscriber) and user: the first tab builds a view, the others await the same one."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        # Keyed by id(frame); the frame is kept alongside, so an id is never reused while
        # its entry lives.
        self._views: OrderedDict[tuple[int, str, str],
                                 tuple[EventFrame, asyncio.Future[View]]] = OrderedDict()

    async def get(self, ctx: ActionContext, frame: EventFrame, load: Load) -> View:
        key = (id(frame), ctx.user_id, ctx.session_id)
        hit = self._views.get(key)
        if hit is None or hit[0] is not frame:
            hit = (frame, asyncio.ensure_future(build(ctx, frame, load)))
            self._views[key] = hit
            while len(self._views) > self.size:
                self._views.popitem(last=False)
        # Shielded: a tab that closes mid-build must not cancel the view the others await.
        return await asyncio.shield(hit[1])


VIEWS = SharedViews()


# -- the sub-agents' cards in their parent's bubble ------------------------------------------


def live_cards(braid: Braid, session_id: str) -> list[ChildCard]:
    """The cards of the sub-agents running now, as they are this instant (synchronous)."""
    cards = []
    for active in braid.runs.for_session(session_id):
        ctx = active.ctx
        if ctx is None or not ctx.run.get("sub_agent"):
            continue
        run = {**ctx.run, "status": "RUNNING"}
        cards.append(card_of_run(run, list(ctx.messages), partial=active.partial))
    return cards


async def add_child_usage(braid: Braid, session_id: str,
                          cards: list[ChildCard]) -> None:
    """The tokens of finished children whose cards came from their parent's records: read
    from each child's own run record, on its branch (one read per child)."""
    wanted = [c for c in cards if not c.get("usage") and c.get("branch") and c.get("run_id")]
    if not wanted:
        return

    def work(git: GitSession) -> dict[str, Usage]:
        out: dict[str, Usage] = {}
        for card in wanted:
            with contextlib.suppress(BraidError, KeyError, ValueError):
                commit = git.commit(git.branch_tip(card["branch"]))
                path = layout.find_run_path(git, card["run_id"], commit)
                if path is not None:
                    record: RunRecord = git.read_json(commit, path)
                    out[card["run_id"]] = record.get("usage") or {}
        return out

    try:
        usage = await braid.store.get(session_id).call(work)
    except BraidError:
        return
    for card in wanted:
        card["usage"] = usage.get(card["run_id"]) or None


async def transcript_with_children(braid: Braid, user_id: str, session_id: str,
                                   **kwargs: Any) -> Transcript:
    """`sessions.transcript` with each turn's sub-agent cards (from records and live runs)."""
    view = await sessions.transcript(braid, user_id, session_id, **kwargs)
    await children_for(braid, view.get("session_id", session_id), view["turns"])
    return view


async def children_for(braid: Braid, session_id: str,
                       turns: list[TranscriptItem]) -> None:
    cards = attach_children(turns, live_cards(braid, session_id))
    await add_child_usage(braid, session_id, cards)


# -- reads for one connection: its catch-up frame, a result ---------------------------------


async def siblings_for(ctx: ActionContext, turn: TranscriptItem) -> TranscriptItem:
    rows = await ctx.braid.index.lineage_runs(ctx.session_id)
    turn["siblings"] = sibling_map(rows).get(turn.get("run_id") or "")
    return turn


async def files_for(ctx: ActionContext, data: EventData) -> list[FileChip]:
    """The chips of a turn that ended (a catch-up redraws it from its record)."""
    run = data.get("run") or RunSummary()
    try:
        return await files_of_run(ctx.braid, ctx.user_id, ctx.session_id, data["run_id"],
                                  run.get("branch"))
    except BraidError:
        return []
