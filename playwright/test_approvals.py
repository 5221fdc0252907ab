"""Approvals on the page, in real Chromium against a real server: the session's mode set from
the session menu, a waiting call as a card in the live bubble (its diff), Approve, Deny with
a reason, Always, and a reload that still shows the waiting call; checked against git."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git, send_from_page

Server = Any
TIMEOUT = 15_000


def set_mode(page: Page, mode: str, server: Server, sid: str) -> None:
    page.click("#session-actions > summary")
    page.select_option("#approvals-select", mode)
    path = server.session_path(sid)
    deadline_ok = False
    for _ in range(100):
        meta = json.loads(git(path, "show", "HEAD:session.json"))
        if meta.get("approvals", "auto") == mode:
            deadline_ok = True
            break
        page.wait_for_timeout(100)
    assert deadline_ok, "the mode never reached session.json"
    page.keyboard.press("Escape")


def test_approve_after_a_reload_and_deny_with_a_reason(page: Page, login: Any,
                                                     shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    set_mode(page, "writes", shared_server, sid)
    path = shared_server.session_path(sid)
    run_id = send_from_page(page, "write a.txt <b>hello</b>")
    card = page.locator(".approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    expect(card.locator(".tool-name")).to_have_text("write_file")
    # The diff, escaped: the new line as text, no element made of it.
    expect(card.locator(".dl-add")).to_have_text("+<b>hello</b>")
    assert card.locator("b").count() == 0
    assert not (path / "workdir" / "a.txt").exists()
    # A reload shows the waiting call, in the live turn.
    page.reload()
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    card.locator(".approve-btn").click()
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(page.locator(".approval-card")).to_have_count(0)
    assert git(path, "show", "HEAD:workdir/a.txt") == "<b>hello</b>\n"

    # Deny, with a reason the model reads as the call's result.
    run_id = send_from_page(page, "write b.txt nope\nsay understood")
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    card.locator(".deny-reason").fill("not this file")
    card.locator(".deny-btn").click()
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    # The closed card says what the user decided, not a bare "error"; a reload too.
    expect(turn.locator(".tool-status")).to_have_text("denied")
    page.reload()
    turn = page.locator(f"#turn-{run_id}")
    expect(turn.locator(".tool-status")).to_have_text("denied", timeout=TIMEOUT)
    turn.locator(".tool-card > summary").click()
    expect(turn.locator(".tool-card")).to_contain_text("denied by the user: not this file")
    assert not (path / "workdir" / "b.txt").exists()


def test_always_and_the_card_on_a_phone(page: Page, login: Any,
                                        shared_server: Server) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sid = shared_server.new_session()
    login(page, sid)
    set_mode(page, "writes", shared_server, sid)
    path = shared_server.session_path(sid)
    run_id = send_from_page(page, "write c.txt one\nbatch\nwrite d.txt two")
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    # Every control of the card fits the phone's width.
    for sel in (".approve-btn", ".always-btn", ".deny-btn", ".deny-reason"):
        control = card.locator(sel)
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, sel
    card.locator(".always-btn").click()
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    # The second write ran unasked.
    assert git(path, "show", "HEAD:workdir/d.txt") == "two\n"
    meta = json.loads(git(path, "show", "HEAD:session.json"))
    assert meta["approvals_always"] == ["write_file"]
    page.click("#session-actions > summary")
    expect(page.locator(".approvals-always")).to_contain_text("write_file")
    expect(page.locator("#approvals-select")).to_have_value("writes")


def test_a_second_tab_shows_the_call_and_its_answer_reaches_the_first(
        page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    status, _ = shared_server.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
    assert status == 200
    login(page, sid)
    run_id = send_from_page(page, "write e.txt both tabs")
    first = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(first).to_be_visible(timeout=TIMEOUT)
    other = page.context.new_page()
    other.goto(f"{shared_server.base_url}/s/{sid}")
    expect(other.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    second = other.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(second).to_be_visible(timeout=TIMEOUT)
    second.locator(".approve-btn").click()
    for tab in (page, other):
        expect(tab.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                                  timeout=TIMEOUT)
        expect(tab.locator(".approval-card")).to_have_count(0)
    assert git(shared_server.session_path(sid), "show", "HEAD:workdir/e.txt") == \
        "both tabs\n"


def test_always_is_taken_back_on_the_page(page: Page, login: Any,
                                          shared_server: Server) -> None:
    """Issue 31: an Always could not be taken back. The session menu lists each tool answered
    Always with a ×; taking one back makes that tool ask again (checked in git and over the
    API), and the menu no longer lists it."""
    sid = shared_server.new_session()
    login(page, sid)
    set_mode(page, "writes", shared_server, sid)
    path = shared_server.session_path(sid)
    run_id = send_from_page(page, "write f.txt one")
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    card.locator(".always-btn").click()
    expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                              timeout=TIMEOUT)
    page.click("#session-actions > summary")
    item = page.locator(".always-item", has_text="write_file")
    expect(item).to_be_visible(timeout=TIMEOUT)
    item.locator(".always-remove").click()
    expect(page.locator(".always-item")).to_have_count(0, timeout=TIMEOUT)
    _, info = shared_server.api("GET", f"/api/sessions/{sid}")
    assert info["approvals_always"] == [] and info["approvals"] == "writes"
    assert "approvals_always" not in json.loads(git(path, "show", "HEAD:session.json"))
    page.keyboard.press("Escape")
    # The next write asks again.
    run_id = send_from_page(page, "write g.txt two")
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    assert not (path / "workdir" / "g.txt").exists()
    card.locator(".approve-btn").click()
    expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                              timeout=TIMEOUT)
    assert git(path, "show", "HEAD:workdir/g.txt") == "two\n"
