"""The transcript of a long session in real Chromium: the page shows the newest 30 turns, and
scrolling up loads the older ones above them (DESIGN §8)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

Server = Any
TIMEOUT = 15_000


def test_scrolling_up_loads_older_turns(page: Page, shared_server: Server, login: Any,
                                        console_errors: Any) -> None:
    sid = shared_server.new_session()
    for i in range(36):
        shared_server.run(sid, f"say turn {i}")
    login(page, sid)
    turns = page.locator("#transcript section.turn")
    expect(turns).to_have_count(30, timeout=TIMEOUT)
    expect(turns.first.locator(".bubble-user")).to_have_text("say turn 6")
    expect(turns.last.locator(".bubble-user")).to_have_text("say turn 35")
    expect(page.locator("#older-turns")).to_have_count(1)
    # The page opens at the newest turn; nothing older is fetched until the user scrolls up.
    page.wait_for_timeout(500)
    expect(turns).to_have_count(30)

    newest = turns.last
    page.locator("#transcript").evaluate("el => { el.scrollTop = 0; }")
    expect(turns).to_have_count(36, timeout=TIMEOUT)
    expect(turns.first.locator(".bubble-user")).to_have_text("say turn 0")
    expect(page.locator("#older-turns")).to_have_count(0)  # the first turn is shown
    # Older turns went above: the order is the chat's, and the newest is still last.
    texts = turns.locator(".bubble-user").all_inner_texts()
    assert texts == [f"say turn {i}" for i in range(36)]
    expect(newest).to_be_attached()
    # A new turn still lands at the end.
    page.fill("#composer-text", "say after scrolling")
    page.press("#composer-text", "Enter")
    expect(turns).to_have_count(37, timeout=TIMEOUT)
    expect(turns.last.locator(".bubble-user")).to_have_text("say after scrolling")
