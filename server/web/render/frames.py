"""Frames for htmx: each socket frame is HTML whose top-level elements the ws extension swaps
out of band by id. The partials are the ones the page itself includes.

`RENDERINGS` (at the end) is the one table from event to how it reaches a page (HTML) and a
script (JSON), one row for every event of base/events.py (tests/web/test_event_table.py).
Event renderers are pure: `(view) -> str`, the view being the event's payload plus what its
row's `load` read for it once, for every tab of the session. Result and error renderers
(one tab each) take the frame's `data` or `error`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.base.results import EventData, EventFrame, EventName
from server.web.errors import Frame
from server.web.import_views import IMPORT_ERRORS, IMPORT_RESULTS
from server.web.render.composer import COMPOSER_ERRORS, COMPOSER_RESULTS, queue_changed
from server.web.render.dag import (
    DAG_ERRORS,
    DAG_RESULTS,
    child_ended,
    dag_changed,
    dag_html,
    lane_grew,
    merged,
    sub_agent_done,
    sub_agent_started,
)
from server.web.render.events import (
    VIEWS,
    Load,
    grows_lane,
    is_sub_agent_run,
    reads_instructions,
    reads_layout,
    reads_nothing,
    reads_queue,
    reads_run_done,
    reads_run_started,
    reads_session_changed,
    reads_session_updated,
    reads_transcript,
)
from server.web.render.fragments import (
    ErrorRenderer,
    EventRenderer,
    ResultRenderer,
    View,
    append_frame,
    instructions_chip,
    oob_append,
    run_state,
    session_list,
    toast,
    turn_from_event,
)
from server.web.render.names import load_names, use
from server.web.render.revert import REVERT_ERRORS, REVERT_RESULTS, reverted
from server.web.render.session import (
    SESSION_RESULTS,
    session_deleted,
    session_updated,
    uploaded,
)
from server.web.render.templating import dom_id, render
from server.web.render.timetravel import run_continued

if TYPE_CHECKING:
    from server.web.specs import ActionContext

# Events whose frame redraws the whole transcript: a resumed run's turn is left out of it by
# run_continued, and its run_started (same run id) then appends it again.
TRANSCRIPT_REDRAWS = ("run_continued", "session_changed")


class HtmlRenderer:
    def __init__(self, ctx: ActionContext) -> None:
        self.ctx = ctx
        # Runs this connection's full catch-up drew from git although their run_started was
        # still queued (a run that began after the subscription and wrote its commits while
        # the catch-up read the transcript): that event redraws the turn instead of adding
        # a second element with the same id.
        self.drawn: set[str] = set()

    toast = staticmethod(toast)

    async def render(self, frame: Frame) -> str:
        if frame["type"] == "event":
            name = frame["event"]
            row = RENDERINGS[name]
            if row.bare is not None:  # deltas name nothing; they come often
                return row.bare(frame["data"])
            event = row.html
            if event is None or not row.shown(self.ctx, frame["data"]):
                return ""
            view = await VIEWS.get(self.ctx, frame, row.load)
            use(view.names)
            if name in TRANSCRIPT_REDRAWS:  # the page's transcript is drawn anew from here
                self.drawn.clear()
            elif name == "run_started" and frame["data"].get("run_id") in self.drawn:
                self.drawn.discard(frame["data"]["run_id"])
                return _run_restarted(view)
            return event(view)
        await load_names(self.ctx.braid, self.ctx.session_id)
        if frame["type"] == "error":
            on_error = ERRORS.get(frame.get("action") or "")
            return await on_error(self, frame["error"]) if on_error else \
                self.toast(frame["error"]["message"])
        fn = RESULTS.get(frame.get("action") or "")
        return await fn(self, frame["data"]) if fn else ""

    async def run_state(self) -> str:
        """For one connection's catch-up frame: the live runs as they are now."""
        return run_state([a.run_id for a in self.ctx.braid.runs.foreground(self.ctx.session_id)])


def _is_compaction(data: EventData) -> bool:
    run = data.get("run")
    return isinstance(run, dict) and run.get("kind") == "compaction"


def _compaction_started(v: View) -> str:
    """A compaction being made: a divider that says so, at the end of the transcript (after
    a reload it stands where its summary sits in the history)."""
    return oob_append("transcript", render("_compaction_live.html", run_id=v.data["run_id"])) \
        + run_state(v.running)


def _compaction_done(v: View) -> str:
    """The divider with its summary in place of the live one (none: the summary failed and
    the turn went on without it; its warning says why)."""
    summary = next(iter(v.data.get("messages") or ()), None)
    if summary is None:
        return render("_compaction_live.html", run_id=v.data["run_id"], gone=True) \
            + run_state(v.running)
    return render("_note.html", item={"message": summary}, oob_part=True) + run_state(v.running)


def _run_started(v: View) -> str:
    if is_sub_agent_run(v.data):  # it streams into its card in the DAG panel instead
        return run_state(v.running)
    if _is_compaction(v.data):
        return _compaction_started(v)
    turn = turn_from_event(v.data, streaming=True)
    run: Mapping[str, object] = v.data.get("run") or {}
    # A new version's branch is named from its run's index row, written after `run_continued`
    # drew the badge ("another version") and before this: named now. A turn runs on the
    # branch shown (sub-agents, in worktrees, left above).
    forked = bool(run.get("forked_from_run_id") or run.get("regenerated_from"))
    return (oob_append("transcript", render("_turn.html", turn=turn))
            + (render("_branch.html", branch=v.data.get("branch")) if forked else "")
            + render("_title.html", title=v.reads.get("title"))
            + (session_list(v.reads["sessions"], v.data["session_id"])
               if v.data.get("titled") else "")
            + run_state(v.running))


def _run_restarted(v: View) -> str:
    """run_started of a turn the page already shows: the turn is drawn again as it started
    (same id, swapped in place); its tool calls and its end follow as events."""
    if is_sub_agent_run(v.data):
        return run_state(v.running)
    return render("_turn.html", turn=turn_from_event(v.data, streaming=True)) + run_state(v.running)


def _output(data: EventData) -> str:
    """A running command's output joins its card (tool-output-RUN-CALL): a data frame the
    page appends as text, as it does a delta."""
    tid = dom_id(f"{data['run_id']}-{data.get('call_id') or ''}")
    return append_frame(f"tool-output-{tid}", data.get("text") or "")


def _delta(data: EventData) -> str:
    """Not HTML: a data frame the page appends as text to the turn's live block (static/core.js
    dataFrame), never parsed as markup; a page that does not show the turn drops it."""
    return append_frame(f"live-{dom_id(data['run_id'])}", data["delta"])


def _tool_call(v: View) -> str:
    card = render("_tool_card.html", run_id=v.data["run_id"], call=v.data["call"], result=None)
    return oob_append(f"parts-{dom_id(v.data['run_id'])}", card, turn_part=True)


def _tool_result(v: View) -> str:
    msg = v.data["message"]
    call = {"id": msg.get("tool_call_id"), "function": {"name": msg.get("name"),
                                                         "arguments": "{}"}}
    # Replace only the card's status and result; the arguments shown stay as they were.
    return render("_tool_result.html", run_id=v.data["run_id"], call=call, result=msg)


def _approval_needed(v: View) -> str:
    """The waiting call as a card in the bubble of the run that shows it."""
    card = render("_approval.html", waiting=v.data, resolved=None)
    return oob_append(f"parts-{dom_id(v.data.get('shown_in') or v.data['run_id'])}", card,
                      turn_part=True)


def _approval_resolved(v: View) -> str:
    return render("_approval.html", waiting=v.data, resolved=v.data.get("decision"))


def _run_done(v: View) -> str:
    if is_sub_agent_run(v.data):  # its card in the parent's bubble
        return child_ended(v)
    if _is_compaction(v.data):
        return _compaction_done(v)
    turn = turn_from_event(v.data, streaming=False)  # the file chips arrive with the bubble
    turn["just_ended"] = True  # its reader is on it: a long answer does not fold
    if "children" in v.reads:  # its sub-agents' cards, their tokens read
        turn["children"] = v.reads["children"]
    html = render("_turn.html", turn=turn) + run_state(v.running)
    if v.data.get("error"):
        html += toast(f"Run failed: {v.data['error']}")
    return html + render("_session_tokens.html", usage=v.reads["usage"], oob=True) \
        + instructions_chip(v)


def _session_changed(v: View) -> str:
    html = render("_transcript.html", transcript=v.reads["transcript"]) + run_state(v.running)
    if v.data.get("branch"):
        html += render("_branch.html", branch=v.data["branch"])
    html += render("_session_tokens.html", usage=v.reads["usage"], oob=True) + instructions_chip(v)
    return html + dag_html(v.reads["layout"], v.data["session_id"])  # marks the branch shown


def _always(ctx: ActionContext, data: EventData) -> bool:
    return True


def as_json(frame: EventFrame) -> str:
    """A script's frame (`?format=json`): the event as published, DESIGN §5."""
    return json.dumps(frame)


@dataclass(frozen=True)
class Rendering:
    """How one event reaches a page and a script. `html` draws it from its view (None: the
    page shows nothing of it), `load` reads what that view needs beyond the payload, `shown`
    decides before any read whether this event draws anything; `bare` draws it from the
    payload alone, without a view (an event that comes often); `json` is a script's frame."""

    html: EventRenderer | None = None
    load: Load = reads_nothing
    shown: Callable[[ActionContext, EventData], bool] = _always
    bare: Callable[[EventData], str] | None = None
    json: Callable[[EventFrame], str] = as_json


_RUN_DONE = Rendering(_run_done, reads_run_done)

# Every event (results.EventName), exactly once.
RENDERINGS: dict[EventName, Rendering] = {
    # a turn
    "run_started": Rendering(_run_started, reads_run_started),
    "message_delta": Rendering(bare=_delta),
    "tool_call": Rendering(_tool_call),
    "tool_result": Rendering(_tool_result),
    "tool_output": Rendering(bare=_output),  # a command's output, into its card
    "checkpoint": Rendering(lane_grew, reads_layout, shown=grows_lane),  # a sub-agent's lane
    "run_completed": _RUN_DONE,
    "run_error": _RUN_DONE,
    "run_cancelled": _RUN_DONE,
    "approval_needed": Rendering(_approval_needed),
    "approval_resolved": Rendering(_approval_resolved),
    # the history
    "reverted": Rendering(reverted, reads_instructions),
    "run_continued": Rendering(run_continued, reads_transcript),
    "dag_changed": Rendering(dag_changed, reads_layout),
    "sub_agent_started": Rendering(sub_agent_started),
    "sub_agent_done": Rendering(sub_agent_done),
    "merged": Rendering(merged),
    # the session
    "session_changed": Rendering(_session_changed, reads_session_changed),
    "session_updated": Rendering(session_updated, reads_session_updated),
    "session_deleted": Rendering(session_deleted),
    "files_uploaded": Rendering(uploaded),
    "queue_changed": Rendering(queue_changed, reads_queue),
}

RESULTS: dict[str, ResultRenderer] = {**REVERT_RESULTS, **DAG_RESULTS, **SESSION_RESULTS,
                                 **COMPOSER_RESULTS, **IMPORT_RESULTS}

# Per-action error frames (`error` = {code, message, details?}); the default is a toast.
ERRORS: dict[str, ErrorRenderer] = {
    **REVERT_ERRORS,
    **DAG_ERRORS,
    **IMPORT_ERRORS,  # export_session, update_from_source: shown in #export-result
    **COMPOSER_ERRORS,
}
