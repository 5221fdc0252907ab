"""Rename, archive, restore and delete a session from the page, in real Chromium against a real
server; what the page shows is checked against session.json and the data folder."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git

Server = Any
TIMEOUT = 15_000


def open_menu(page: Page) -> None:
    page.click("#session-actions > summary")
    expect(page.locator("#rename-input")).to_be_visible()


def test_rename_archive_restore_from_the_page(page: Page, login: Any,
                                              shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "hello there")
    login(page, sid)
    open_menu(page)
    expect(page.locator("#rename-input")).to_be_focused()
    page.fill("#rename-input", "Quarterly report")
    page.press("#rename-input", "Enter")
    expect(page.locator("#session-title")).to_have_text("Quarterly report", timeout=TIMEOUT)
    item = page.locator(f"#session-list [data-session-id='{sid}']")
    expect(item.locator(".session-name")).to_have_text("Quarterly report")
    expect(page).to_have_title(re.compile("^Quarterly report"))
    meta = json.loads(git(shared_server.session_path(sid), "show", "HEAD:session.json"))
    assert meta["title"] == "Quarterly report"

    # Archive: gone from the list, listed under "Archived sessions", a badge with Restore.
    open_menu(page)
    page.click("#archive-session")
    expect(item).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator(".badge-archived")).to_be_visible()
    page.click("#archived-box > summary")
    archived = page.locator(f"#archived-list [data-session-id='{sid}']")
    expect(archived).to_have_text("Quarterly report", timeout=TIMEOUT)
    # Reload: still archived.
    page.reload()
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator(f"#session-list [data-session-id='{sid}']")).to_have_count(0)
    page.click("#restore-session")
    expect(page.locator(f"#session-list [data-session-id='{sid}']")).to_have_count(
        1, timeout=TIMEOUT)
    expect(page.locator(".badge-archived")).to_have_count(0)
    meta = json.loads(git(shared_server.session_path(sid), "show", "HEAD:session.json"))
    assert "archived" not in meta


def test_a_bad_name_is_refused_and_nothing_changes(page: Page, login: Any,
                                                   shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.api("PATCH", f"/api/sessions/{sid}", {"title": "Kept"})
    login(page, sid)
    open_menu(page)
    page.fill("#rename-input", "   ")
    page.evaluate("document.getElementById('rename-input').required = false")
    page.press("#rename-input", "Enter")
    expect(page.locator(".toast")).to_contain_text("title must not be empty", timeout=TIMEOUT)
    expect(page.locator("#session-title")).to_have_text("Kept")


def test_delete_asks_first_then_removes_the_folder(page: Page, login: Any,
                                                   shared_server: Server,
                                                   console_errors: Any) -> None:
    keep = shared_server.new_session()
    shared_server.run(keep, "a session that stays")
    sid = shared_server.new_session()
    shared_server.run(sid, "write a.txt doomed")
    path = shared_server.session_path(sid)
    login(page, sid)
    open_menu(page)
    page.click("#delete-session")
    dialog = page.locator("#delete-dialog")
    expect(dialog).to_be_visible()
    # Cancel keeps everything.
    dialog.locator("[data-close-dialog]").click()
    expect(dialog).to_be_hidden()
    assert path.exists()
    open_menu(page)
    page.click("#delete-session")
    page.click("#confirm-delete")
    expect(page).not_to_have_url(re.compile(sid), timeout=TIMEOUT)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator(f"[data-session-id='{sid}']")).to_have_count(0)
    assert not path.exists()
    db = sqlite3.connect(shared_server.data_dir / "index.sqlite3")
    try:
        assert db.execute("SELECT count(*) FROM sessions WHERE session_id = ?",
                          (sid,)).fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM runs WHERE session_id = ?",
                          (sid,)).fetchone() == (0,)
    finally:
        db.close()
    # Its old address (a bookmark, another tab) says the session is gone, with a way back:
    # a 404 page, which Chromium reports in the console as it does any 404.
    console_errors.allow(r"status of 404 \(Not Found\)$")
    page.goto(f"{shared_server.base_url}/s/{sid}")
    expect(page.locator("#session-gone")).to_contain_text("It was deleted")
    expect(page.locator("#token")).to_have_count(0)  # not the login form
    page.click("#session-gone a")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)


def test_empty_new_sessions_do_not_pile_up(page: Page, login: Any,
                                           shared_server: Server) -> None:
    used = shared_server.new_session()
    shared_server.run(used, "say something")
    login(page, used)
    page.click("#new-session")
    expect(page).not_to_have_url(re.compile(used))
    first_new = page.url.rsplit("/", 1)[1]
    expect(page.locator("#empty-state")).to_be_visible()
    # Back on the used session, New session again: the untouched one is reused.
    page.goto(f"{shared_server.base_url}/s/{used}")
    page.click("#new-session")
    expect(page).to_have_url(re.compile(first_new))
    before = len(shared_server.api("GET", "/api/sessions")[1]["sessions"])
    page.goto(f"{shared_server.base_url}/s/{used}")
    page.click("#new-session")
    expect(page).to_have_url(re.compile(first_new))
    assert len(shared_server.api("GET", "/api/sessions")[1]["sessions"]) == before


def test_a_fork_gets_its_own_title(page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "say plan the trip")
    login(page, sid)
    page.click("#fork-session")
    expect(page).not_to_have_url(re.compile(sid), timeout=TIMEOUT)
    expect(page.locator("#session-title")).to_have_text("say plan the trip (fork)")
    fork_id = page.url.rsplit("/", 1)[1]
    expect(page.locator(f"#session-list [data-session-id='{fork_id}'] .session-name")).to_have_text(
        "say plan the trip (fork)")
