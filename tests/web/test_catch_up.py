"""A reconnecting page's full catch-up reads the transcript from git after it subscribed to
the session's events. A run that started after the subscription and wrote its commits during
that read is drawn by the catch-up; its queued `run_started` must then redraw that turn in
place, never add a second element with the same id (the page showed two answers)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import TOKEN, run_to_end
from server.app.braid import Braid
from server.base.settings import Settings
from server.features import sessions
from server.web import live
from server.web.render.frames import HtmlRenderer
from server.web.specs import ActionContext


async def _scenario(data_dir: Path) -> tuple[str, str, str]:
    braid = Braid(Settings(data_dir=data_dir, token=TOKEN))
    await braid.start()
    try:
        made = await sessions.create_session(braid, "local")
        sid = made["session_id"]
        queue = braid.bus.subscribe(sid)
        run = await run_to_end(braid, "local", sid, "say made while away")
        frames = []
        while not queue.empty():
            frames.append(queue.get_nowait())
        started = next(f for f in frames if f.get("event") == "run_started")
        assert started["data"]["run_id"] == run["run_id"]
        ctx = ActionContext(braid, "local", sid, "html")
        plain = await HtmlRenderer(ctx).render(started)  # a page that never drew the turn
        caught = HtmlRenderer(ctx)
        first = await live.catch_up(caught, [], True, [])  # the turn is in git already
        again = await caught.render(started)
        return run["run_id"], plain, first + "\n<!--then-->\n" + again
    finally:
        await braid.stop()


def test_a_turn_drawn_by_the_catch_up_is_redrawn_by_its_queued_start(tmp_path: Path) -> None:
    # On a thread of its own: the browser tests' event loop may be running on this one.
    with ThreadPoolExecutor(1) as pool:
        run_id, plain, seen = pool.submit(asyncio.run, _scenario(tmp_path / "data")).result()
    first, again = seen.split("\n<!--then-->\n")
    turn_id = f'id="turn-{run_id}"'
    assert 'hx-swap-oob="beforeend"' in plain and turn_id in plain  # appended as new
    assert first.count(turn_id) == 1  # the catch-up drew the finished turn
    assert turn_id in again, "the start redraws the turn"
    assert 'id="transcript" hx-swap-oob="beforeend"' not in again, "no second copy"
    assert again.count(turn_id) == 1
