"""HTML frames for the composer: the text typed stays in the box until the server has
accepted it (`send_message`'s result), so a refused send (a run already going) loses nothing."""

from __future__ import annotations

from markupsafe import escape

from server.base.errors import ErrorInfo
from server.base.results import RunStarted
from server.web.render.fragments import ErrorRenderer, Renderer, ResultRenderer


async def _sent(r: Renderer, data: RunStarted) -> str:
    run_id = escape(str(data.get("run_id") or ""))
    return f'<span id="composer-ack" hidden data-state="accepted" data-run-id="{run_id}"></span>'


async def _refused(r: Renderer, error: ErrorInfo) -> str:
    message = str(error.get("message") or "not sent")
    text = f"Not sent, your text is kept: {message}"
    if error.get("code") == "busy":
        text += ". Send when the run ends, or press Esc to stop it."
    return '<span id="composer-ack" hidden data-state="refused"></span>' + r.toast(text)


COMPOSER_RESULTS: dict[str, ResultRenderer] = {"send_message": _sent}
COMPOSER_ERRORS: dict[str, ErrorRenderer] = {"send_message": _refused}
