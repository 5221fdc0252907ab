"""The demo model's help (issue 23): on an empty session using the demo model, the page lists
the instructions it follows, each with an example that a click puts in the message box; sent,
it does what the help says; the help is gone once the session has a turn, and is not shown
for another model. Real Chromium against a real server."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import git

Server = Any
TIMEOUT = 20_000
KEYWORDS = ["write", "append", "read", "delete", "shell", "batch", "say", "slow", "fail",
            "recall", "notes"]


@pytest.mark.parametrize("size", [{"width": 1400, "height": 900}, {"width": 390, "height": 844}],
                         ids=["laptop", "phone"])
def test_demo_help_lists_the_instructions_and_fills_the_composer(
        page: Page, login: Any, shared_server: Server, size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = shared_server.new_session()
    login(page, sid)
    help_box = page.locator("#demo-help")
    expect(help_box).to_be_visible(timeout=TIMEOUT)
    expect(help_box.locator("h3")).to_be_in_viewport()  # the page opens at its start
    words = [t.split()[0] for t in help_box.locator("dt").all_inner_texts()]
    assert words == KEYWORDS
    # Every example is a button that fits the screen.
    examples = help_box.locator("button.demo-example")
    expect(examples).to_have_count(len(KEYWORDS))
    for box in (examples.nth(i).bounding_box() for i in range(len(KEYWORDS))):
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= size["width"]
    # A click fills the message box (a two-line example keeps its lines).
    help_box.locator("button.demo-example", has_text="batch").scroll_into_view_if_needed()
    help_box.locator("button.demo-example", has_text="batch").click()
    expect(page.locator("#composer-text")).to_have_value("write a.txt one\nbatch\nappend a.txt two")
    help_box.locator("button.demo-example", has_text="notes/todo.md Buy milk").click()
    expect(page.locator("#composer-text")).to_have_value("write notes/todo.md Buy milk\\nCall Ana")
    expect(page.locator("#composer-text")).to_be_focused()
    page.press("#composer-text", "Enter")
    turn = page.locator("section.turn").first
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(turn.locator(".chip-added")).to_contain_text("notes/todo.md")
    expect(help_box).to_be_hidden()
    content = git(shared_server.session_path(sid), "show", "HEAD:workdir/notes/todo.md")
    assert content.strip() == "Buy milk\nCall Ana"


def test_no_demo_help_for_another_model(page: Page, login: Any,
                                        shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    expect(page.locator("#demo-help")).to_be_visible(timeout=TIMEOUT)
    # Another model picked (set as the picker would show it, without asking the server).
    page.evaluate("""() => { const s = document.getElementById('model-select');
        s.add(new Option('gpt-x · work', 'gpt-x@work')); s.value = 'gpt-x@work'; }""")
    expect(page.locator("#demo-help")).to_be_hidden()
    expect(page.locator("#empty-state")).to_be_visible()
