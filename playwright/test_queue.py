"""The queue on the page, in real Chromium against a real server: typed during a `slow` run,
Send queues the message (it shows below the transcript, in every tab and after a reload);
Edit changes it inline, Remove drops it; the rest runs after the run, in order. At a laptop's
and a phone's size, every control of the queue is in view and usable."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 20_000
# A run that outlasts every step of a test however slow the machine (~60 s); the tests stop
# it when they are done with the queue, and the queue runs after it as after any end.
LONG = "slow 150\nsay " + " ".join(f"w{i}" for i in range(400))
SIZES = [pytest.param({"width": 1400, "height": 900}, id="laptop"),
         pytest.param({"width": 390, "height": 844}, id="phone")]


def queue_send(page: Page, text: str) -> None:
    page.fill("#composer-text", text)
    page.press("#composer-text", "Enter")
    expect(page.locator("#composer-text")).to_have_value("", timeout=TIMEOUT)


def queued_texts(page: Page) -> list[str]:
    return [t.strip() for t in page.locator("#queue .queued-text").all_text_contents()]


@pytest.mark.parametrize("size", SIZES)
def test_queue_edit_remove_and_the_rest_runs_after(page: Page, login: Any,
                                                   shared_server: Server,
                                                   size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = shared_server.new_session()
    login(page, sid)
    other = page.context.new_page()  # a second tab on the session
    other.goto(f"{shared_server.base_url}/s/{sid}")
    other.wait_for_selector("#conn[data-state=open]", timeout=10_000)
    first = send_from_page(page, LONG)
    expect(page.locator("#run-state")).to_have_attribute("data-running", "1")
    expect(page.locator("#send-btn")).to_be_enabled()  # Send queues while the agent works
    expect(page.locator("#composer-hint")).to_contain_text("queues")
    for text in ("say one", "say two", "say three"):
        queue_send(page, text)
    expect(page.locator("#queue .queued")).to_have_count(3, timeout=TIMEOUT)
    assert queued_texts(page) == ["say one", "say two", "say three"]
    assert page.locator("section.turn").count() == 1  # queued, not started
    expect(other.locator("#queue .queued")).to_have_count(3, timeout=TIMEOUT)  # every tab
    # Edit the second one inline, then save.
    second = page.locator("#queue .queued").nth(1)
    second.locator(".queued-edit-btn").click()
    box = second.locator(".queued-edit textarea")
    expect(box).to_be_visible()
    expect(box).to_be_in_viewport()
    box.fill("say TWO")
    expect(second.locator(".queued-save-btn")).to_be_in_viewport()
    second.locator(".queued-save-btn").click()
    expect(page.locator("#queue .queued-text").nth(1)).to_have_text("say TWO", timeout=TIMEOUT)
    expect(other.locator("#queue .queued-text").nth(1)).to_have_text("say TWO", timeout=TIMEOUT)
    # Remove the first one.
    remove = page.locator("#queue .queued").first.locator(".queued-remove-btn")
    expect(remove).to_be_in_viewport()
    remove.click()
    expect(page.locator("#queue .queued")).to_have_count(2, timeout=TIMEOUT)
    assert queued_texts(page) == ["say TWO", "say three"]
    # A reload shows the queue as it is.
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=10_000)
    assert page.locator(f"#turn-{first}").get_attribute("data-status") == "RUNNING"
    assert queued_texts(page) == ["say TWO", "say three"]
    # The run ends (stopped); the rest runs after it, in order, and the queue empties.
    page.locator("#stop-btn").click()
    expect(page.locator(f"#turn-{first}")).to_have_attribute("data-status", "CANCELLED",
                                                             timeout=TIMEOUT)
    turns = page.locator("section.turn")
    expect(turns).to_have_count(3, timeout=30_000)
    expect(turns.nth(2)).to_have_attribute("data-status", "COMPLETED", timeout=30_000)
    expect(turns.nth(1).locator(".bubble-user").first).to_have_text("say TWO")
    expect(turns.nth(2).locator(".bubble-user").first).to_have_text("say three")
    expect(page.locator("#queue")).to_be_hidden()
    expect(other.locator("#queue")).to_be_hidden(timeout=TIMEOUT)
    expect(other.locator("section.turn")).to_have_count(3, timeout=TIMEOUT)
    box = page.locator("#send-btn").bounding_box()
    assert box is not None and box["x"] + box["width"] <= size["width"]


def test_an_edit_survives_the_queue_redrawn_by_another_send(page: Page, login: Any,
                                                            shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    first = send_from_page(page, LONG)
    queue_send(page, "say one")
    expect(page.locator("#queue .queued")).to_have_count(1, timeout=TIMEOUT)
    page.locator("#queue .queued-edit-btn").click()
    page.locator("#queue .queued-edit textarea").fill("say ONE, half typed")
    ws = shared_server.socket(sid)  # another client queues: the queue is redrawn
    try:
        assert ws.call("send_message", text="say two", queue=True)["type"] == "result"
    finally:
        ws.close()
    expect(page.locator("#queue .queued")).to_have_count(2, timeout=TIMEOUT)
    box = page.locator("#queue .queued").first.locator(".queued-edit textarea")
    expect(box).to_be_visible()
    expect(box).to_have_value("say ONE, half typed")
    box.press("Escape")  # cancel: the message stays as it was
    expect(page.locator("#queue .queued-text").first).to_have_text("say one")
    expect(page.locator("#queue .queued-text").first).to_be_visible()
    # Esc closed the edit and did not stop the run (Esc is Stop only when nothing is open).
    expect(page.locator(f"#turn-{first}")).to_have_attribute("data-status", "RUNNING")
    expect(page.locator("#queue .queued")).to_have_count(2)
    ws = shared_server.socket(sid)
    try:
        assert ws.call("cancel_run", run_id=first)["type"] == "result"
    finally:
        ws.close()


def test_an_edit_open_when_its_message_starts_lands_in_the_message_box(
        page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    first = send_from_page(page, LONG)
    queue_send(page, "say q1")
    expect(page.locator("#queue .queued")).to_have_count(1, timeout=TIMEOUT)
    page.locator("#queue .queued-edit-btn").click()
    page.locator("#queue .queued-edit textarea").fill("say q1 edited late")
    ws = shared_server.socket(sid)  # the run ends before the edit is saved: q1 starts
    try:
        assert ws.call("cancel_run", run_id=first)["type"] == "result"
    finally:
        ws.close()
    expect(page.locator("#queue")).to_be_hidden(timeout=TIMEOUT)
    # What was typed is not lost: it waits in the message box, with a word saying why.
    expect(page.locator("#composer-text")).to_have_value("say q1 edited late")
    expect(page.locator("#toasts .queued-rescued")).to_contain_text(
        "your edit is in the message box")
    expect(page.locator("section.turn").nth(1).locator(".bubble-user").first).to_have_text("say q1")
