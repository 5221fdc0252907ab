"""HTML frames for time travel. `run_continued` comes before the continued run's `run_started`:
the session may now show another branch, so the transcript is re-rendered without that run's
turn (which `run_started` then appends, streaming), with the branch badge; a run resumed at
the branch's end loses its Resume there (its record says so from the new run's first
checkpoint on). Turns rendered from events get their `‹ 2/3 ›` switcher data from the
payload (`siblings`)."""

from __future__ import annotations

from server.base.results import Transcript
from server.web.render.fragments import View, instructions_chip, run_state
from server.web.render.templating import render
from server.web.render.turn_view import resumed_by


def run_continued(v: View) -> str:
    shown = v.reads["transcript"]
    view: Transcript = {**shown, "turns": [t for t in shown["turns"]
                                           if t.get("run_id") != v.data["run_id"]]}
    source = v.data.get("source_run_id")
    if source and source != v.data["run_id"] and not v.data.get("forked"):
        # A resume at the branch's end: the run it goes on with offers Resume no more.
        resumed_by(view["turns"], str(source), v.data["run_id"])
    return (render("_transcript.html", transcript=view)
            + render("_branch.html", branch=v.data.get("branch"))
            + render("_session_tokens.html", usage=v.reads["usage"], oob=True)
            + instructions_chip(v)
            + run_state(v.running))

