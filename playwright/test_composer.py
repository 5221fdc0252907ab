"""The composer and the keyboard, in real Chromium against a real server: typing while a run
goes keeps the text, Send then queues (the message runs after the run), Esc stops it, a
refused send keeps the text, the draft survives a reload, the composer has focus on load and
a skip link leads to it."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 15_000
SLOW = "slow 150\nsay " + " ".join(f"w{i}" for i in range(40))


def test_typing_during_a_run_is_kept_and_send_queues(page: Page, login: Any,
                                                     shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    run_id = send_from_page(page, SLOW)
    # Send queues while a run goes (playwright/test_queue.py shows the queue itself).
    expect(page.locator("#send-btn")).to_be_enabled()
    expect(page.locator("#composer-queue")).to_have_value("true")
    box = page.locator("#composer-text")
    box.type("my next")  # typing goes on while the answer streams
    box.press("Shift+Enter")
    box.type("message")
    expect(box).to_have_value("my next\nmessage")
    expect(page.locator("#composer-hint")).to_contain_text("Esc stops it")
    assert page.locator("section.turn").count() == 1
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=30_000)
    expect(page.locator("#send-btn")).to_be_enabled()
    expect(page.locator("#composer-queue")).to_have_value("false")
    expect(box).to_have_value("my next\nmessage")
    box.press("Enter")
    expect(page.locator("section.turn")).to_have_count(2, timeout=TIMEOUT)
    expect(box).to_have_value("")
    expect(page.locator("section.turn").nth(1).locator(".bubble-user").first).to_have_text(
        "my next\nmessage")


def test_escape_stops_the_run(page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    run_id = send_from_page(page, SLOW)
    expect(page.locator(f"#live-{run_id} .live-block").first).to_be_attached(timeout=TIMEOUT)
    page.keyboard.press("Escape")
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "CANCELLED", timeout=TIMEOUT)
    expect(page.locator("#send-btn")).to_be_enabled()


def test_a_refused_send_keeps_the_text(page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    ws = shared_server.socket(sid)  # another client starts a run the page does not know of
    try:
        # The page's Send is enabled (it has not heard of the run yet when it sends).
        page.evaluate("""() => { const s = document.getElementById('run-state');
                                 s.dataset.running = '0'; }""")
        ws.call("send_message", text=SLOW)
        page.fill("#composer-text", "keep me")
        # Once the page heard of it, it would queue the message (test_queue.py): here it is
        # made not to know, and sends at once (one script, so no frame comes in between).
        expect(page.locator("#run-state")).to_have_attribute("data-running", "1",
                                                             timeout=TIMEOUT)
        page.evaluate("""() => {
            document.getElementById('run-state').dataset.running = '0';
            document.getElementById('composer').requestSubmit(); }""")
        expect(page.locator("#toasts .toast").last).to_contain_text("your text is kept",
                                                                    timeout=TIMEOUT)
        expect(page.locator("#composer-text")).to_have_value("keep me")
        ws.call("cancel_run")
    finally:
        ws.close()


def test_draft_per_session_survives_a_reload(page: Page, login: Any,
                                             shared_server: Server) -> None:
    first, second = shared_server.new_session(), shared_server.new_session()
    login(page, first)
    page.locator("#composer-text").type("half a thought")
    page.goto(f"{shared_server.base_url}/s/{second}")
    expect(page.locator("#composer-text")).to_have_value("")
    page.goto(f"{shared_server.base_url}/s/{first}")
    expect(page.locator("#composer-text")).to_have_value("half a thought")
    page.reload()
    expect(page.locator("#composer-text")).to_have_value("half a thought")
    page.locator("#composer-text").press("Enter")
    expect(page.locator("section.turn")).to_have_count(1, timeout=TIMEOUT)
    expect(page.locator("#composer-text")).to_have_value("")
    page.reload()
    expect(page.locator("#composer-text")).to_have_value("")


def test_focus_on_load_skip_link_and_after_revert(page: Page, login: Any,
                                                 shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write a.txt one")
    login(page, sid)
    expect(page.locator("#composer-text")).to_be_focused()
    # From the top of the page, the first Tab reaches the skip link, which leads to the box.
    page.goto(f"{shared_server.base_url}/s/{sid}?again=1#top")
    expect(page.locator("#composer-text")).not_to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    expect(page.locator(".skip-link")).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#composer-text")).to_be_focused()
    # Revert with the keyboard; focus lands on Redo, not on the page.
    page.locator(".revert-btn").focus()
    page.keyboard.press("Enter")
    page.locator(".confirm-revert").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".redo-btn")).to_be_focused(timeout=TIMEOUT)
    expect(page.locator("details.revert-menu[open]")).to_have_count(0)
