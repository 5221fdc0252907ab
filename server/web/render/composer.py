"""HTML frames for the composer: the text typed stays in the box until the server has
accepted it (`send_message`'s result: started, or queued), so a refused send loses nothing;
and the queue below the transcript (`_queue.html`), redrawn in every tab by `queue_changed`."""

from __future__ import annotations

from markupsafe import escape

from server.base.errors import ErrorInfo
from server.base.results import Queued, RunStarted
from server.web.render.fragments import (
    ErrorRenderer,
    Renderer,
    ResultRenderer,
    View,
)
from server.web.render.templating import render


async def _sent(r: Renderer, data: RunStarted | Queued) -> str:
    run_id = escape(str(data.get("run_id") or ""))
    queued_id = escape(str(data.get("queued_id") or ""))
    return (f'<span id="composer-ack" hidden data-state="accepted" data-run-id="{run_id}" '
            f'data-queued-id="{queued_id}"></span>')


async def _refused(r: Renderer, error: ErrorInfo) -> str:
    message = str(error.get("message") or "not sent")
    text = f"Not sent, your text is kept: {message}"
    if error.get("code") == "busy":
        text += ". Send when the run ends, or press Esc to stop it."
    return '<span id="composer-ack" hidden data-state="refused"></span>' + r.toast(text)


def queue_changed(v: View) -> str:
    return render("_queue.html", queued=v.reads.get("queue") or [])


COMPOSER_RESULTS: dict[str, ResultRenderer] = {"send_message": _sent}
COMPOSER_ERRORS: dict[str, ErrorRenderer] = {"send_message": _refused}
