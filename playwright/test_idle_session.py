"""A page left open past BRAID_IDLE_SECONDS: the server releases the session (its repository,
and its handle once nobody holds it: store/session_store.py, issue 11) and the page goes on
as before, in the same tab and after a reload."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git, send_from_page

IDLE = 1.0  # seconds; the reaper looks every half of it


def test_a_page_left_idle_goes_on_after_the_session_is_released(
        page: Page, server_factory: Any, console_errors: Any) -> None:
    server = server_factory(BRAID_IDLE_SECONDS=str(IDLE))
    sid = server.new_session()
    page.goto(f"{server.base_url}/login?token={server.token}")
    page.goto(f"{server.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=10_000)
    send_from_page(page, "write a.txt one", until_done=True)
    time.sleep(IDLE * 4)  # released: idle for IDLE, then the reaper's next steps
    # The open page's socket still holds the handle: the same tab sends on.
    send_from_page(page, "write b.txt two", until_done=True)
    time.sleep(IDLE * 4)
    page.reload()
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=10_000)
    expect(page.locator("section.turn")).to_have_count(2)
    send_from_page(page, "write c.txt three", until_done=True)
    expect(page.locator("section.turn")).to_have_count(3)
    folder = server.session_path(sid)
    for name, text in (("a", "one"), ("b", "two"), ("c", "three")):
        assert git(folder, "show", f"HEAD:workdir/{name}.txt") == f"{text}\n"
    assert git(folder, "status", "--porcelain") == ""
