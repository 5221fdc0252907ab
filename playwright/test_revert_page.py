"""Reverting turns in real Chromium against a real server: file chips, the diff, Revert with
its confirmation, the Reverted badge and Redo, a second tab kept in sync, and the conflict
toast's "Revert anyway"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any  # the root conftest's `Server`
TIMEOUT = 15_000
LINES = "\\n".join(f"line {i}" for i in range(1, 9))


def send(page: Page, text: str) -> str:
    return send_from_page(page, text, until_done=True)


def chips(page: Page, run_id: str) -> Any:
    return page.locator(f"#footer-{run_id} .chip[data-path]")


def revert(page: Page, run_id: str) -> None:
    footer = page.locator(f"#footer-{run_id}")
    footer.locator(".revert-btn").click()
    confirm = footer.locator(".confirm-revert")
    expect(confirm).to_be_visible()
    confirm.click()


def test_chips_diff_revert_redo_and_a_second_tab(page: Page, login: Any,
                                                 shared_server: Server) -> None:
    session_id = shared_server.new_session()
    work = Path(shared_server.session_path(session_id)) / "workdir"
    login(page, session_id)
    send(page, "write a.txt alpha\nwrite b.txt beta")
    tid = send(page, "write a.txt alpha two\ndelete b.txt\nwrite c.txt gamma")

    # The chips came with the finished bubble: one per file, coloured by status.
    expect(chips(page, tid)).to_have_count(3)
    for path, status in [("a.txt", "modified"), ("b.txt", "deleted"), ("c.txt", "added")]:
        chip = page.locator(f"#footer-{tid} .chip[data-path='{path}']")
        expect(chip).to_have_attribute("data-status", status)
        expect(chip).to_have_class(f"chip chip-{status}")

    # A click on a chip shows that file's diff.
    page.locator(f"#footer-{tid} .chip[data-path='c.txt']").click()
    panel = page.locator(f"#diff-{tid}")
    expect(panel).to_be_visible(timeout=TIMEOUT)
    expect(panel.locator(".dl-add")).to_have_text(["+gamma"])
    page.locator(f"#footer-{tid} .chip[data-path='a.txt']").click()
    expect(panel.locator(".dl-del")).to_have_text(["-alpha"], timeout=TIMEOUT)
    expect(panel.locator(".dl-add")).to_have_text(["+alpha two"])
    panel.locator("[data-close-diff]").click()
    expect(panel).to_be_hidden()

    # A second tab on the same session.
    other = page.context.new_page()
    login(other, session_id)
    expect(chips(other, tid)).to_have_count(3)  # rendered with the page, no extra request

    revert(page, tid)
    expect(page.locator(f"#footer-{tid} .badge-reverted")).to_have_text("Reverted",
                                                                         timeout=TIMEOUT)
    assert not (work / "c.txt").exists() and (work / "b.txt").read_text() == "beta\n"
    assert (work / "a.txt").read_text() == "alpha\n"
    # The other tab updates without a reload: badge, Redo, and the note in the transcript.
    expect(other.locator(f"#footer-{tid} .badge-reverted")).to_be_visible(timeout=TIMEOUT)
    note = other.locator(".note").last
    expect(note).to_contain_text(re.compile(r"Turn \d+ was reverted"))  # a name, not the hash
    expect(note.locator(".named")).to_have_attribute("title", tid)

    other.locator(f"#footer-{tid} .redo-btn").click()
    expect(page.locator(f"#footer-{tid} .badge-reverted")).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator(f"#footer-{tid} .revert-btn")).to_be_visible()
    assert (work / "c.txt").read_text() == "gamma\n" and not (work / "b.txt").exists()

    # A reload shows the same state, from git.
    page.reload()
    expect(chips(page, tid)).to_have_count(3)
    expect(page.locator(f"#footer-{tid} .revert-btn")).to_be_visible()
    expect(page.locator(".note")).to_have_count(2)
    other.close()


def test_conflict_toast_offers_revert_anyway(page: Page, login: Any,
                                            shared_server: Server) -> None:
    session_id = shared_server.new_session()
    work = Path(shared_server.session_path(session_id)) / "workdir"
    login(page, session_id)
    send(page, f"write a.txt {LINES}")
    tid = send(page, f"write a.txt {LINES.replace('line 2', 'line 2 by the turn')}")
    send(page, f"write a.txt {LINES.replace('line 2', 'line 2 by a later turn')}")
    before = (work / "a.txt").read_text()

    revert(page, tid)
    toast = page.locator(".toast.revert-conflict")
    expect(toast).to_be_visible(timeout=TIMEOUT)
    expect(toast.locator(".conflict-files li")).to_have_text(["a.txt"])
    assert (work / "a.txt").read_text() == before  # refused: nothing changed
    expect(page.locator(f"#footer-{tid} .badge-reverted")).to_have_count(0)

    toast.get_by_role("button", name="Revert anyway").click()
    expect(page.locator(f"#footer-{tid} .badge-reverted")).to_be_visible(timeout=TIMEOUT)
    expect(toast).to_have_count(0)
    assert (work / "a.txt").read_text() == LINES.replace("\\n", "\n") + "\n"
    page.screenshot(path="/tmp/braid-revert.png", full_page=True)

    page.locator(f"#footer-{tid} .redo-btn").click()
    expect(page.locator(f"#footer-{tid} .badge-reverted")).to_have_count(0, timeout=TIMEOUT)
    assert (work / "a.txt").read_text() == before
