"""What the model is sent, on the page (issue 33), in real Chromium at a laptop's and a phone's
size: the header's instructions chip when the branch has an AGENTS.md (it opens the file),
a compaction's divider ("N earlier turns summarized", the summary expandable, the turns above
it still there), "Compact now" in the ⋯ menu drawing a new divider live, and the turn's token
count naming each part of what was sent, on hover."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

# The layout checks of test_layout.py (this folder is not a package: its name is the
# library's), loaded by path.
_spec = importlib.util.spec_from_file_location("layout_checks",
                                               Path(__file__).with_name("test_layout.py"))
assert _spec is not None and _spec.loader is not None
layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout)
HEADER, SIZES, TIMEOUT, check = layout.HEADER, layout.SIZES, layout.TIMEOUT, layout.check

Server = Any


def compacted_session(server: Server) -> str:
    sid = server.new_session()
    server.run(sid, "write AGENTS.md Be brief.")
    for i in range(3):
        server.run(sid, f"say t{i}")
    status, body = server.api("POST", f"/api/sessions/{sid}/compact", {})
    assert status == 200, body
    server.run(sid, "say after")
    return sid


@pytest.mark.parametrize("size", SIZES)
def test_divider_summary_and_instructions_chip(page: Page, login: Any, shared_server: Server,
                                               size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = compacted_session(shared_server)
    login(page, sid)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)

    # The divider, the turns it stands for still above it.
    divider = page.locator(".compaction-divider").first
    expect(divider.locator("summary")).to_have_text("3 earlier turns summarized")
    assert page.locator(".compaction-divider ~ section.turn").count() == 1  # "say after"
    assert page.locator("section.turn:has(~ .compaction-divider)").count() == 4
    expect(divider.locator(".compaction-summary")).to_be_hidden()
    divider.locator("summary").click()
    expect(divider.locator(".compaction-summary")).to_contain_text(
        "summary: write AGENTS.md Be brief. | say t0 | say t1")
    divider.scroll_into_view_if_needed()
    check(page, HEADER + [".compaction-divider"], "compaction")

    # The token count says what the last call was sent, part by part.
    usage = page.locator("section.turn").last.locator(".turn-usage")
    title = usage.get_attribute("title") or ""
    assert "system prompt" in title and "instructions" in title and "summary" in title, title

    # The chip: instructions in effect; it opens AGENTS.md in the file panel.
    chip = page.locator("#instructions-chip .instructions-chip")
    expect(chip).to_be_visible()
    assert "AGENTS.md" in (chip.get_attribute("title") or "")
    chip.click()
    expect(page.locator("#files-dialog")).to_be_visible(timeout=TIMEOUT)
    expect(page.locator("#file-view")).to_contain_text("Be brief.", timeout=TIMEOUT)
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    expect(page.locator("#files-dialog")).to_be_hidden()

    # Compact now, from the ⋯ menu: a second divider, drawn live.
    page.click(".session-menu-btn")
    page.click("#compact-now")
    expect(page.locator(".compaction-divider")).to_have_count(2, timeout=TIMEOUT)
    expect(page.locator(".compaction-divider summary").last).to_have_text(
        "5 earlier turns summarized", timeout=TIMEOUT)
    page.reload()
    expect(page.locator(".compaction-divider")).to_have_count(2, timeout=TIMEOUT)


def test_no_chip_without_instructions(page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "say hello")
    login(page, sid)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#instructions-chip .instructions-chip")).to_have_count(0)
    # A turn that writes AGENTS.md brings the chip when it ends (its last call had it).
    page.fill("#composer-text", "write AGENTS.md Use tabs.\nbatch\nsay ok")
    page.keyboard.press("Enter")
    chip = page.locator("#instructions-chip .instructions-chip")
    expect(chip).to_be_visible(timeout=TIMEOUT)
    expect(chip).to_have_attribute("title", re.compile(r"AGENTS\.md of this branch \(10 B"))
    # Reverting that turn takes the file away, and the chip with it; Redo brings both back.
    turn = page.locator("#transcript > section.turn").last
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    footer = page.locator(f"#footer-{turn.get_attribute('data-run-id')}")
    footer.locator(".revert-btn").click()
    footer.locator(".confirm-revert").click()
    expect(chip).to_have_count(0, timeout=TIMEOUT)
    footer.locator(".redo-btn").click()
    expect(chip).to_be_visible(timeout=TIMEOUT)
