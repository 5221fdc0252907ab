"""HTML frames for the composer: the text typed stays in the box until the server has
accepted it (`send_message`'s result), so a refused send (a run already going) loses nothing."""

from __future__ import annotations

from typing import Any

from markupsafe import escape

from server.web.render.fragments import Renderer, ResultRenderer


async def _sent(r: Renderer, data: dict[str, Any]) -> str:
    run_id = escape(str(data.get("run_id") or ""))
    return f'<span id="composer-ack" hidden data-state="accepted" data-run-id="{run_id}"></span>'


async def _refused(r: Renderer, error: dict[str, Any]) -> str:
    message = str(error.get("message") or "not sent")
    text = f"Not sent, your text is kept: {message}"
    if error.get("code") == "busy":
        text += ". Send when the run ends, or press Esc to stop it."
    return '<span id="composer-ack" hidden data-state="refused"></span>' + r.toast(text)


COMPOSER_RESULTS: dict[str, ResultRenderer] = {"send_message": _sent}
COMPOSER_ERRORS: dict[str, ResultRenderer] = {"send_message": _refused}
