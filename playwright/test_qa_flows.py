"""Regressions found by QA, in real Chromium against a real server: each test failed before its
fix."""

from __future__ import annotations

import dataclasses
from typing import Any

from playwright.sync_api import Page, expect

Server = Any  # the root conftest's `Server`
TIMEOUT = 15_000


def test_a_restart_mid_run_leaves_no_stale_stop_button(page: Page, server_factory: Any,
                                                       console_errors: Any) -> None:
    console_errors.allow_server_down()
    # The page is open while a turn streams; the server stops (the run becomes INTERRUPTED)
    # and comes back. The catch-up after the reconnect used to refresh only the transcript,
    # so the Stop button and "The agent is working…" stayed until a reload.
    srv = server_factory()
    sid = srv.new_session()
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{sid}")
    conn = page.locator("#conn")
    expect(conn).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    # Long enough (~10 s) that the server stops mid-run even when a loaded machine is slow
    # to get from SIGTERM to stopping the run: a run that ends first proves nothing here.
    page.fill("#composer-text", "slow 400\nsay " + " ".join(["word"] * 24))
    page.press("#composer-text", "Enter")
    turn = page.locator("#transcript > section.turn").last
    expect(turn.locator(".live .live-block").first).to_be_attached(timeout=TIMEOUT)  # streaming
    expect(page.locator("#stop-btn")).to_be_visible()
    run_id = turn.get_attribute("data-run-id")

    srv.stop()
    expect(conn).to_have_attribute("data-state", "reconnecting", timeout=TIMEOUT)
    again = dataclasses.replace(srv, proc=None)
    again.start()
    try:
        expect(conn).to_have_attribute("data-state", "open", timeout=30_000)
        back = page.locator(f"#turn-{run_id}")
        expect(back).to_have_attribute("data-status", "INTERRUPTED", timeout=TIMEOUT)
        expect(page.locator("#stop-btn")).to_have_count(0)
        expect(page.locator("#run-state")).to_have_attribute("data-running", "0")
        expect(back.locator(".resume-btn")).to_be_visible()
        # The transcript keeps following new output after the catch-up, and Resume works.
        back.locator(".resume-btn").click()
        # The resumed run streams its whole answer again (~10 s).
        expect(back).to_have_attribute("data-status", "COMPLETED", timeout=60_000)
        expect(page.locator("#stop-btn")).to_have_count(0, timeout=TIMEOUT)
    finally:
        again.stop()


def test_phone_history_button_sits_in_the_top_bar(page: Page, login: Any,
                                                  shared_server: Server) -> None:
    # On a 390px phone the closed History panel's button floated over the transcript and hid
    # the end of right-aligned user bubbles; opened, a long run/… branch name pushed the
    # "shown" badge out of the panel.
    sid = shared_server.new_session()
    source = shared_server.run(sid, "say first")
    ws = shared_server.socket(sid)
    try:
        ws.call("continue_run", run_id=source["run_id"], regenerate=True)
        ws.event("run_completed")
    finally:
        ws.close()
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, sid)
    toggle = page.locator("#dag-panel [data-toggle-dag]")
    expect(toggle).to_be_visible()
    button = toggle.bounding_box()
    transcript = page.locator("#transcript").bounding_box()
    topbar = page.locator(".topbar").bounding_box()
    assert button and transcript and topbar
    assert button["y"] + button["height"] <= transcript["y"] + 1, (button, transcript)
    # The top bar's own controls stay clear of it.
    conn = page.locator("#conn").bounding_box()
    assert conn and conn["x"] + conn["width"] <= button["x"], (conn, button)

    toggle.click()
    panel = page.locator("#dag-panel").bounding_box()
    badge = page.locator("#dag .dag-branch.current .badge")
    expect(badge).to_be_visible()
    box = badge.bounding_box()
    assert panel and box and box["x"] + box["width"] <= panel["x"] + panel["width"], (box, panel)


def test_resume_shows_on_an_interrupted_turn_that_is_not_the_last(
        page: Page, server_factory: Any, console_errors: Any) -> None:
    # A restart with messages queued runs them after the INTERRUPTED run (features/queue.py):
    # its Resume must stay in reach, not hidden as Regenerate is on all but the last answer.
    console_errors.allow_server_down()
    srv = server_factory()
    sid = srv.new_session()
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    page.fill("#composer-text", "slow 400\nsay " + " ".join(["word"] * 24))
    page.press("#composer-text", "Enter")
    turn = page.locator("#transcript > section.turn").last
    expect(turn.locator(".live .live-block").first).to_be_attached(timeout=TIMEOUT)
    run_id = turn.get_attribute("data-run-id")
    srv.stop()
    again = dataclasses.replace(srv, proc=None)
    again.start()
    try:
        later = again.run(sid, "say after the restart")
        page.reload()
        expect(page.locator(f"#turn-{later['run_id']}")).to_have_attribute(
            "data-status", "COMPLETED", timeout=TIMEOUT)
        back = page.locator(f"#turn-{run_id}")
        expect(back).to_have_attribute("data-status", "INTERRUPTED")
        expect(back.locator(".resume-btn")).to_be_visible()
        expect(page.locator(f"#turn-{later['run_id']} .regen-btn")).to_be_visible()
    finally:
        again.stop()
