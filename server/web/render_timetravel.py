"""HTML frames for time travel. `run_continued` comes before the continued run's `run_started`:
the session may now show another branch, so the transcript is re-rendered without that run's
turn (which `run_started` then appends, streaming), with the branch badge. Turns rendered from
events get their `‹ 2/3 ›` switcher data here too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import sessions
from ..core.lineage import sibling_map
from .templating import render

if TYPE_CHECKING:
    from .render_html import HtmlRenderer

Renderer = Any  # Callable[[HtmlRenderer, dict], Awaitable[str]]; avoids an import cycle


async def with_siblings(r: HtmlRenderer, turn: dict[str, Any]) -> dict[str, Any]:
    rows = await r.ctx.braid.index.list_runs(r.ctx.session_id)
    turn["siblings"] = sibling_map(rows).get(turn.get("run_id") or "")
    return turn


async def _run_continued(r: HtmlRenderer, data: dict[str, Any]) -> str:
    view = await sessions.transcript(r.ctx.braid, r.ctx.user_id, r.ctx.session_id)
    view["turns"] = [t for t in view["turns"] if t.get("run_id") != data["run_id"]]
    return (render("_transcript.html", transcript=view)
            + render("_branch.html", branch=data.get("branch"))
            + await r.run_state())


TIMETRAVEL_EVENTS: dict[str, Renderer] = {"run_continued": _run_continued}
