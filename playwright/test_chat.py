"""The chat page in real Chromium against a real server: login, sending, streaming, tool cards,
reload, error toasts, safe Markdown, Stop, the connection indicator, phone screens."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page

# The root conftest's `Server` (the name `conftest` here is playwright/conftest.py).
Server = Any
TIMEOUT = 15_000


def send(page: Page, text: str) -> str:
    return send_from_page(page, text)


def turn(page: Page, run_id: str) -> Any:
    return page.locator(f"#turn-{run_id}")


def squash(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def test_login_url_sets_the_cookie_and_a_bad_token_is_refused(
        page: Page, shared_server: Server, console_errors: Any) -> None:
    console_errors.allow(r"status of 401")  # the refused token's page
    page.goto(f"{shared_server.base_url}/")
    expect(page).to_have_url(re.compile(r"/login$"))
    response = page.goto(f"{shared_server.base_url}/login?token=wrong-token")
    assert response is not None and response.status == 401
    expect(page.locator(".form-error")).to_contain_text("not valid")
    # Pasting the token into the form works too.
    page.fill("#token", shared_server.token)
    page.click(".login-form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/s/[0-9a-f]{32}$"))
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["braid_token"]["httpOnly"] is True


def test_send_streams_shows_the_tool_card_and_survives_reload(
        page: Page, login: Any, shared_server: Server) -> None:
    session_id = shared_server.new_session()
    login(page, session_id)
    expect(page.locator("#empty-state")).to_be_visible()
    run_id = send(page, "write notes/a.txt hello\nslow 150")
    # Streaming: words appear in the live area while the turn is still running (checked in
    # one step in the page, so a fast finish cannot pass for streaming).
    page.wait_for_function("""(id) => {
        const live = document.getElementById('live-' + id);
        const turn = document.getElementById('turn-' + id);
        return live && turn && turn.dataset.status === 'RUNNING'
            && live.textContent.includes('done:');
    }""", arg=run_id, polling=30, timeout=TIMEOUT)
    expect(page.locator("#stop-btn")).to_be_visible()
    expect(page.locator("#empty-state")).to_be_hidden()
    expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(page.locator("#stop-btn")).to_have_count(0)
    expect(turn(page, run_id).locator(".md")).to_have_text("done: wrote notes/a.txt")
    expect(page.locator("#session-title")).to_have_text("write notes/a.txt hello")

    card = turn(page, run_id).locator("details.tool-card")
    expect(card).to_have_count(1)
    expect(card.locator(".tool-name")).to_have_text("write_file")
    expect(card.locator(".tool-target")).to_have_text("notes/a.txt")
    expect(card.locator(".tool-status")).to_have_text("done")
    expect(card.locator(".tool-args")).to_be_hidden()
    card.locator("summary").click()
    expect(card.locator(".tool-args")).to_be_visible()
    expect(card.locator(".tool-args")).to_contain_text('"path": "notes/a.txt"')
    expect(card.locator(".tool-output")).to_contain_text("created notes/a.txt")

    path = shared_server.session_path(session_id)
    assert (path / "workdir/notes/a.txt").read_text() == "hello\n"

    streamed = squash(turn(page, run_id).text_content())
    page.reload()
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED")
    assert squash(turn(page, run_id).text_content()) == streamed
    expect(page.locator("section.turn")).to_have_count(1)
    expect(page.locator(f"#turn-{run_id} .bubble-user")).to_have_text(
        "write notes/a.txt hello\nslow 150")


def test_model_error_shows_a_toast_and_the_error_in_the_bubble(
        page: Page, login: Any, shared_server: Server) -> None:
    login(page, shared_server.new_session())
    run_id = send(page, "fail boom")
    expect(turn(page, run_id)).to_have_attribute("data-status", "ERROR", timeout=TIMEOUT)
    expect(turn(page, run_id).locator(".run-error")).to_contain_text("boom")
    toast = page.locator("#toasts .toast")
    expect(toast).to_contain_text("boom")
    toast.locator(".toast-close").click()
    expect(toast).to_have_count(0)
    # A refused action (a second send while busy is not possible here) also toasts: Stop with
    # nothing running answers not_found.
    page.evaluate("""() => {
        const form = document.createElement('form');
        form.setAttribute('ws-send', '');
        form.innerHTML = '<input type="hidden" name="action" value="cancel_run">';
        document.querySelector('#app').appendChild(form);
        htmx.process(form);
        form.requestSubmit();
    }""")
    expect(page.locator("#toasts .toast")).to_contain_text("no run")


def test_markdown_is_rendered_without_raw_html(page: Page, login: Any,
                                               shared_server: Server) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, shared_server.new_session())
    run_id = send(page, "say <img src=x onerror=alert(1)> **bold** [x](javascript:alert(2))")
    expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    answer = turn(page, run_id).locator(".md")
    expect(answer.locator("strong")).to_have_text("bold")
    expect(answer).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator(f"#turn-{run_id} img").count() == 0
    assert page.locator(f"#turn-{run_id} a[href^='javascript']").count() == 0
    page.reload()
    expect(turn(page, run_id).locator(".md strong")).to_have_text("bold")
    assert page.locator(f"#turn-{run_id} img").count() == 0
    assert dialogs == []


def test_a_turn_shows_the_names_it_left_out(page: Page, login: Any,
                                           shared_server: Server) -> None:
    """Issue 21 rows 5 and 6: names on disk git cannot hold (here made by the user in
    workdir/) are left out of the turn's commit, and its bubble says which and why, escaped,
    live and after a reload."""
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sid = shared_server.new_session()
    work = shared_server.session_path(sid) / "workdir"
    hostile = "<img src=x onerror=alert(1)>"
    (work / ".git.").mkdir()
    (work / ".git." / hostile).write_text("x")
    (work / os.fsdecode(b"bad\xff.txt")).write_text("y")
    login(page, sid)
    run_id = send(page, "write ok.txt fine")
    expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    for _ in range(2):  # live, then as the page renders it from the history
        note = turn(page, run_id).locator(".run-skipped")
        expect(note).to_contain_text("Not saved in the history")
        expect(note).to_contain_text(f".git./{hostile}")
        expect(note).to_contain_text("names the repository's .git folder")
        expect(note).to_contain_text("bad\\xff.txt (not valid UTF-8)")
        assert page.locator(f"#turn-{run_id} img").count() == 0
        page.reload()
        page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    assert dialogs == []


def test_stop_cancels_a_slow_run(page: Page, login: Any, shared_server: Server) -> None:
    session_id = shared_server.new_session()
    login(page, session_id)
    run_id = send(page, "slow 300\nsay one two three four five six seven eight nine ten")
    expect(page.locator(f"#live-{run_id}")).to_contain_text("one", timeout=TIMEOUT)
    page.click("#stop-btn")
    expect(turn(page, run_id)).to_have_attribute("data-status", "CANCELLED", timeout=TIMEOUT)
    expect(turn(page, run_id).locator(".run-flag")).to_have_text("Stopped")
    expect(page.locator("#stop-btn")).to_have_count(0)
    status, run = shared_server.api("GET", f"/api/runs/{run_id}?session_id={session_id}")
    assert status == 200 and run["status"] == "CANCELLED"
    assert "ten" not in (run["messages"][-1]["content"] or "")


def test_new_session_button_opens_a_new_session(page: Page, login: Any,
                                                shared_server: Server) -> None:
    first = shared_server.new_session()
    login(page, first)
    page.click("#new-session")
    expect(page).not_to_have_url(re.compile(first))
    expect(page).to_have_url(re.compile(r"/s/[0-9a-f]{32}$"))
    new_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#empty-state")).to_be_visible()
    expect(page.locator(f'.session-item[data-session-id="{new_id}"]')).to_have_attribute(
        "aria-current", "page")
    expect(page.locator(f'.session-item[data-session-id="{first}"]')).to_have_count(1)
    status, info = shared_server.api("GET", f"/api/sessions/{new_id}")
    assert status == 200 and info["runs"] == []


def test_phone_screen_shows_the_composer_and_toggles_the_sidebar(
        page: Page, login: Any, shared_server: Server) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, shared_server.new_session())
    composer = page.locator("#composer-text")
    expect(composer).to_be_visible()
    box = composer.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert box["y"] + box["height"] <= 844
    expect(page.locator("#send-btn")).to_be_in_viewport()

    def sidebar_right() -> float:
        return float(page.evaluate(
            "() => document.querySelector('#sidebar').getBoundingClientRect().right"))

    toggle = page.locator("[data-toggle-sidebar]")
    expect(toggle).to_be_visible()
    assert sidebar_right() <= 0
    toggle.click()
    page.wait_for_function(
        "() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0")
    expect(page.locator("#new-session")).to_be_in_viewport()
    page.keyboard.press("Escape")
    page.wait_for_function(
        "() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0")
    # Sending works on the phone too.
    run_id = send(page, "say hello phone")
    expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(turn(page, run_id).locator(".md")).to_be_in_viewport()


def test_connection_indicator_reconnects_after_a_restart(
        page: Page, server_factory: Any, tmp_path: Path, console_errors: Any) -> None:
    console_errors.allow_server_down()
    data_dir = tmp_path / "restart-data"
    srv = server_factory(data_dir)
    session_id = srv.new_session()
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{session_id}")
    conn = page.locator("#conn")
    expect(conn).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    srv.stop()
    expect(conn).to_have_attribute("data-state", "reconnecting", timeout=TIMEOUT)
    # A new server on the same port and data dir: the page reconnects by itself.
    again = dataclasses.replace(srv, proc=None)
    again.start()
    try:
        # A run made while the page was away shows up after the catch-up.
        done = again.run(session_id, "say made while away")
        expect(conn).to_have_attribute("data-state", "open", timeout=30_000)
        expect(turn(page, done["run_id"]).locator(".md")).to_have_text(
            "made while away", timeout=TIMEOUT)
        run_id = send(page, "say back again")
        expect(turn(page, run_id)).to_have_attribute("data-status", "COMPLETED",
                                                     timeout=TIMEOUT)
    finally:
        again.stop()
