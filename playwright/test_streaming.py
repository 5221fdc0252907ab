"""Streaming whose cost per chunk is flat (issue 23), in real Chromium against a real server:
the deltas are appended as text to a few blocks of the live answer (no element per delta,
nothing parsed as HTML), exactly, in order; the view follows the end only while the reader is
at the bottom; old turns are laid out only when scrolled into view. The speed itself is
measured in bench/stream.py."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 30_000
TRICKY = ["<b>bold</b>", "\"quoted\"", "'single'", "<img src=x onerror=alert(1)>", "a&b"]
WORDS = [f"w{i}" for i in range(1, 250)] + TRICKY + [f"w{i}" for i in range(250, 500)] + ["fin"]
ANSWER = " ".join(WORDS)


def live_state(page: Page, run_id: str) -> dict[str, Any]:
    return dict(page.evaluate("""(id) => {
        const live = document.getElementById('live-' + id);
        if (!live) return {gone: true};
        return {gone: false, text: live.textContent,
                elements: live.querySelectorAll('*').length,
                blocks: live.querySelectorAll(':scope > .live-block').length};
    }""", run_id))


def test_deltas_become_text_in_a_few_blocks(page: Page, login: Any,
                                             shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    run_id = send_from_page(page, "slow 8\nsay " + ANSWER)
    page.wait_for_function("""(id) => {
        const live = document.getElementById('live-' + id);
        return live && live.textContent.split(' ').length > 300;
    }""", arg=run_id, polling=50, timeout=TIMEOUT)
    state = live_state(page, run_id)
    if not state["gone"]:
        assert ANSWER.startswith(state["text"]), state["text"][-80:]
        # One block per ~2,000 characters, each one text node: no element per delta.
        assert state["elements"] == state["blocks"], state
        assert 1 <= state["blocks"] <= len(ANSWER) // 1000 + 1, state
    # At the end, the server's Markdown.
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(turn.locator(".md")).to_have_text(ANSWER)
    assert turn.locator(".md b, .md img").count() == 0  # raw HTML never gets through


def test_the_view_follows_the_end_only_at_the_bottom(page: Page, login: Any,
                                                     shared_server: Server) -> None:
    sid = shared_server.new_session()
    for _ in range(3):
        shared_server.run(sid, "say " + "an earlier answer that fills the page " * 40)
    login(page, sid)
    page.set_viewport_size({"width": 900, "height": 600})
    long = " ".join(f"x{i}" for i in range(1, 400)) + " fin"
    run_id = send_from_page(page, "slow 15\nsay " + long)
    grown = """([id, n]) => {
        const live = document.getElementById('live-' + id);
        return !!live && live.textContent.split(' ').length > n;
    }"""
    at_end = "() => { const t = document.getElementById('transcript'); " \
             "return t.scrollHeight - t.scrollTop - t.clientHeight < 4; }"
    page.wait_for_function(grown, arg=[run_id, 40], polling=20, timeout=TIMEOUT)
    page.wait_for_function(at_end, polling=20, timeout=TIMEOUT)  # it follows
    # The browser's own upward scroll (keeping the view in place while old turns above get
    # their real height) is not the reader's: the view still follows the end.
    page.evaluate("() => { document.getElementById('transcript').scrollTop -= 400; }")
    page.wait_for_function(grown, arg=[run_id, 60], polling=20, timeout=TIMEOUT)
    page.wait_for_function(at_end, polling=20, timeout=TIMEOUT)
    # The reader scrolls up: the view stays where they are while the answer grows.
    page.locator("#transcript").hover()
    page.mouse.wheel(0, -200_000)
    page.wait_for_function("() => document.getElementById('transcript').scrollTop === 0",
                           polling=20, timeout=TIMEOUT)
    page.wait_for_function(grown, arg=[run_id, 120], polling=20, timeout=TIMEOUT)
    assert page.evaluate("() => document.getElementById('transcript').scrollTop") == 0
    # Back at the bottom: it follows again.
    page.evaluate("() => { const t = document.getElementById('transcript'); "
                  "t.scrollTop = t.scrollHeight; }")
    page.wait_for_timeout(50)
    page.wait_for_function(grown, arg=[run_id, 250], polling=20, timeout=TIMEOUT)
    page.wait_for_function(at_end, polling=20, timeout=TIMEOUT)
    expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                              timeout=TIMEOUT)


def test_old_turns_are_laid_out_only_in_view(page: Page, login: Any,
                                             shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "say " + "x " * 2000)
    for i in range(4):
        shared_server.run(sid, f"say turn {i}")
    login(page, sid)
    parts = page.locator("#transcript section.turn .parts").first
    assert parts.evaluate("el => getComputedStyle(el).contentVisibility") == "auto"
    # Long answers come collapsed, with a Show more.
    expect(page.locator("#transcript .md.collapsible").first).to_be_attached()
    expect(page.locator("#transcript .show-more").first).to_have_text("Show more")


def test_a_long_answer_streamed_at_full_speed_is_shown_whole(page: Page, login: Any,
                                                             shared_server: Server) -> None:
    """3,000 words with no pause between them: 3,000 frames can outrun the page, and the
    server then lets its socket go as one that fell behind. The page must reconnect and
    catch up: it was closed with a code htmx-ext-ws does not reconnect on, and the page sat at
    "Reconnecting…" with no turn."""
    sid = shared_server.new_session()
    login(page, sid)
    words = [f"w{i}" for i in range(1, 3000)] + ["fin"]
    run_id = send_from_page(page, "say " + " ".join(words))
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=120_000)
    expect(turn.locator(".md")).to_have_text(" ".join(words), timeout=TIMEOUT)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
