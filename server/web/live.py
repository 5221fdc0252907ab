"""Live turns on a page opened (or a socket connected) mid-run: the turn so far, rendered from
the run's in-memory messages and the text streaming now, so a reload or a second tab shows
the run and keeps streaming it.

The socket's catch-up is exact: the connection subscribes to the session's events and takes
the snapshot in the same step (no `await` between), and the catch-up frame is sent before any
queued event. Deltas after the snapshot follow it; none before it is sent twice."""

from __future__ import annotations

from typing import TypedDict

from server.app.braid import Braid
from server.base.errors import BraidError
from server.base.records import MessageRecord, RunRecord, RunRow
from server.base.results import ChildCard, EventData, Transcript, TranscriptItem, WaitingCall
from server.features import queue, sessions
from server.web.render.events import add_child_usage, files_for, siblings_for
from server.web.render.fragments import turn_from_event
from server.web.render.frames import HtmlRenderer
from server.web.render.names import load_names
from server.web.render.templating import render
from server.web.render.turn_view import attach_children, card_of_run, resumed_by


class LiveTurn(TypedDict):
    """A foreground run as it is this instant: its record, its messages, the text so far."""

    run_id: str
    branch: str
    run: RunRecord | RunRow
    messages: list[MessageRecord]
    partial: str
    waiting: list[WaitingCall]  # tool calls shown in it, waiting for approval
    output: dict[str, str]  # its running commands' output so far, by call id


def snapshot(braid: Braid, session_id: str) -> list[LiveTurn]:
    """The live runs of a session as they are this instant (synchronous on purpose): the
    foreground ones, and the sub-agents (their cards in their parent's bubble)."""
    out: list[LiveTurn] = []
    for active in braid.runs.for_session(session_id):
        ctx = active.ctx
        if ctx is None:  # claimed, not started: its run_started event is still to come
            continue
        # It may be committing its end right now.
        run = ctx.run.copy()
        run["status"] = "RUNNING"
        out.append({"run_id": ctx.run_id, "branch": active.branch, "run": run,
                    "messages": [m.copy() for m in ctx.messages], "partial": active.partial,
                    "waiting": waiting_in(braid, session_id, ctx.run_id),
                    "output": dict(active.output)})
    return out


def waiting_in(braid: Braid, session_id: str, run_id: str) -> list[WaitingCall]:
    """The calls waiting for approval that `run_id`'s bubble shows (a sub-agent's too)."""
    return [w.copy() for a in braid.runs.for_session(session_id)
            for w in a.waiting.values() if w["shown_in"] == run_id]


def live_turn(item: LiveTurn) -> TranscriptItem:
    turn = turn_from_event({"run_id": item["run_id"], "run": item["run"],
                            "messages": item["messages"]}, streaming=True)
    turn["live_text"] = item["partial"]
    turn["waiting"] = item["waiting"]
    turn["live_output"] = item["output"]
    return turn


def child_cards(live: list[LiveTurn]) -> list[ChildCard]:
    """The cards of the sub-agents among the live runs, as they are now."""
    return [card_of_run(item["run"], item["messages"], partial=item["partial"])
            for item in live if item["run"].get("sub_agent")]


def merge_live(view: Transcript, live: list[LiveTurn], branch: str) -> Transcript:
    """A transcript view with each live run of `branch` shown as its live turn, at the end."""
    shown = [item for item in live if item["branch"] == branch]
    if not shown:
        return view
    ids = {item["run_id"] for item in shown}
    turns = [t for t in view["turns"] if t.get("run_id") not in ids]
    for item in shown:  # a resume at the branch's end before its first checkpoint
        source = item["run"].get("resumes_run_id")
        if source:
            resumed_by(turns, str(source), item["run_id"])
    return {**view, "turns": turns + [live_turn(item) for item in shown]}


def with_waiting(braid: Braid, session_id: str, view: Transcript) -> Transcript:
    """Calls waiting for approval in a finished turn's bubble (a sub-agent the user spawned
    from it): live turns carry their own."""
    shown = {w["shown_in"] for a in braid.runs.for_session(session_id)
             for w in a.waiting.values()}
    for turn in view["turns"]:
        run_id = turn.get("run_id")
        if run_id in shown and not turn.get("streaming"):
            turn["waiting"] = waiting_in(braid, session_id, run_id or "")
    return view


async def page_transcript(braid: Braid, user_id: str, session_id: str,
                          branch: str) -> Transcript:
    live = snapshot(braid, session_id)
    view = with_waiting(braid, session_id, merge_live(
        await sessions.transcript(braid, user_id, session_id), live, branch))
    cards = attach_children(view["turns"], child_cards(live))
    await add_child_usage(braid, session_id, cards)
    return view


async def catch_up(r: HtmlRenderer, live: list[LiveTurn], full: bool,
                   shown_live: list[str]) -> str:
    """The first frame of a socket. `full` (a reconnect: events may have been missed) redraws
    the transcript, run state, branch, title and queue. Otherwise `shown_live` names the runs the
    page showed as running: each is redrawn as it is now (live, or finished), and a run that
    started after the page was rendered is appended."""
    branch = await sessions.current_branch(r.ctx.braid, r.ctx.user_id, r.ctx.session_id)
    await load_names(r.ctx.braid, r.ctx.session_id)
    if full:
        view = await sessions.transcript(r.ctx.braid, r.ctx.user_id, r.ctx.session_id)
        # Any turn drawn here that the snapshot did not hold may have started after it: its
        # queued run_started must redraw it in place (render_html.HtmlRenderer.drawn).
        live_ids = {item["run_id"] for item in live}
        r.drawn = {rid for t in view["turns"] if (rid := t.get("run_id"))} - live_ids
        info = r.ctx.braid.store.get(r.ctx.session_id).meta
        view = with_waiting(r.ctx.braid, r.ctx.session_id, merge_live(view, live, branch))
        await add_child_usage(r.ctx.braid, r.ctx.session_id,
                              attach_children(view["turns"], child_cards(live)))
        queued = await queue.list_queue(r.ctx.braid, r.ctx.user_id, r.ctx.session_id)
        return (render("_transcript.html", transcript=view)
                + await r.run_state() + render("_branch.html", branch=branch)
                + render("_title.html", title=info.get("title"))
                + render("_queue.html", queued=queued["queued"]))
    html = ""
    live_ids = set()
    cards = child_cards(live)
    for card in cards:  # a sub-agent's card the page drew: as it is now
        if card["run_id"] in shown_live:
            html += render("_sub_agent_card.html", card=card)
            live_ids.add(card["run_id"])
    for item in live:
        if item["branch"] != branch:
            continue
        live_ids.add(item["run_id"])
        turn = live_turn(item)
        attach_children([turn], cards)
        turn_html = render("_turn.html", turn=await siblings_for(r.ctx, turn))
        if item["run_id"] in shown_live:
            html += turn_html  # replaces the page's copy (same id)
        else:
            html += f'<div id="transcript" hx-swap-oob="beforeend">{turn_html}</div>'
    for run_id in shown_live:
        if run_id in live_ids:
            continue
        try:  # it ended between the page's render and this socket
            run = await sessions.get_run(r.ctx.braid, r.ctx.user_id, r.ctx.session_id, run_id)
        except BraidError:
            continue
        data: EventData = {"run_id": run_id, "run": run, "messages": run.get("messages") or []}
        if run.get("sub_agent"):  # a sub-agent's card: how it ended
            html += render("_sub_agent_card.html", card=card_of_run(
                run, data["messages"], files=await files_for(r.ctx, data)))
            continue
        ended = await siblings_for(r.ctx, turn_from_event(data, streaming=False))
        ended["files"] = await files_for(r.ctx, data)
        html += render("_turn.html", turn=ended)
    if shown_live or live_ids:
        html += await r.run_state()
    return html
