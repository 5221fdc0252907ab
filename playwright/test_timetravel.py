"""Time travel in real Chromium against a real server: Edit & rerun makes a sibling run, the
`‹ 2/3 ›` switcher flips between siblings with their files, Regenerate adds a sibling answer,
Fork session opens the new session under its parent in the sidebar."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

Server = Any  # the root conftest's `Server`
TIMEOUT = 15_000


def last_turn(page: Page) -> Any:
    return page.locator("#transcript > section.turn").last


def workdir(server: Server, session_id: str) -> list[str]:
    root = Path(server.session_path(session_id)) / "workdir"
    return sorted(p.name for p in root.iterdir() if p.is_file())


def wait_done(page: Page) -> None:
    expect(last_turn(page)).to_have_attribute("data-status", re.compile("COMPLETED|ERROR"),
                                              timeout=TIMEOUT)
    expect(page.locator("#stop-btn")).to_have_count(0, timeout=TIMEOUT)


def test_edit_rerun_switcher_and_regenerate(page: Page, login: Any,
                                            shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write base.txt base")
    source = shared_server.run(sid, "write x.txt from-source")
    login(page, sid)
    turn = page.locator(f"#turn-{source['run_id']}")
    expect(turn).to_be_visible()
    expect(turn.locator(".switcher")).to_have_count(0)  # no siblings yet

    # Edit & rerun: an inline editor on the user message.
    editor = turn.locator(".msg-user details.edit-rerun")
    editor.locator("summary").click()
    box = editor.locator("textarea")
    expect(box).to_have_value("write x.txt from-source")
    box.fill("write y.txt from-edit")
    editor.locator("button[type=submit]").click()

    new_turn = last_turn(page)
    expect(new_turn.locator(".bubble-user").first).to_have_text("write y.txt from-edit",
                                                                 timeout=TIMEOUT)
    wait_done(page)
    new_id = new_turn.get_attribute("data-run-id")
    assert new_id and new_id != source["run_id"]
    expect(page.locator(f"#turn-{source['run_id']}")).to_have_count(0)  # the other branch
    expect(page.locator("#branch-badge")).to_have_attribute("data-branch", f"run/{new_id}")
    expect(page.locator("#branch-badge")).to_have_text(re.compile(r"^Edit of turn \d+$"))  # no hash
    switcher = new_turn.locator(".switcher")
    expect(switcher.locator(".switcher-pos")).to_have_text("2/2")
    expect(switcher.locator(".switch-next")).to_be_disabled()
    # The fork's files: the edit's, not the source's.
    expect(new_turn.locator(".chip-path")).to_have_text(["y.txt"])
    assert workdir(shared_server, sid) == ["base.txt", "y.txt"]

    # ‹ shows the source run again, with its files.
    switcher.locator(".switch-prev").click()
    back = page.locator(f"#turn-{source['run_id']}")
    expect(back).to_be_visible(timeout=TIMEOUT)
    expect(back.locator(".switcher-pos")).to_have_text("1/2")
    expect(page.locator("#branch-badge")).to_have_text("main")
    expect(back.locator(".chip-path")).to_have_text(["x.txt"])
    assert workdir(shared_server, sid) == ["base.txt", "x.txt"]
    # › goes forth again.
    back.locator(".switch-next").click()
    expect(page.locator(f"#turn-{new_id}")).to_be_visible(timeout=TIMEOUT)
    assert workdir(shared_server, sid) == ["base.txt", "y.txt"]

    # Regenerate, on the last answer only: a sibling answer, no tool run again.
    expect(page.locator(".regen-btn:visible")).to_have_count(1)
    page.locator(f"#turn-{new_id} .regen-btn").click()
    regen_turn = last_turn(page)
    expect(regen_turn).not_to_have_attribute("data-run-id", new_id, timeout=TIMEOUT)
    wait_done(page)
    expect(regen_turn.locator(".switcher-pos")).to_have_text("3/3")
    expect(regen_turn.locator("details.tool-card")).to_have_count(1)
    expect(regen_turn.locator(".tool-status")).to_have_text("done")
    expect(regen_turn.locator(".md").last).to_have_text("done: wrote y.txt")
    assert workdir(shared_server, sid) == ["base.txt", "y.txt"]
    # The regenerated run is marked; it is still there behind ‹.
    regen_turn.locator(".switch-prev").click()
    replaced = page.locator(f"#turn-{new_id}")
    expect(replaced).to_be_visible(timeout=TIMEOUT)
    expect(replaced.locator(".status-regenerated")).to_have_text("regenerated")
    page.screenshot(path="/tmp/timetravel-switcher.png")


def test_fork_session_opens_the_fork_under_its_parent(page: Page, login: Any,
                                                      shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write keep.txt parent")
    login(page, sid)
    expect(page.locator("#lineage")).to_have_count(0)
    page.locator("#fork-session").click()
    page.wait_for_url(re.compile(r"/s/(?![0-9a-f]*" + sid + r")[0-9a-f]{32}$"),
                      timeout=TIMEOUT)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    fork_id = page.url.rsplit("/", 1)[1]
    assert fork_id != sid
    # In the sidebar, right under its parent and indented; the top bar names the parent.
    items = page.locator("#session-list .session-item")
    ids = [items.nth(i).get_attribute("data-session-id") for i in range(items.count())]
    assert ids.index(fork_id) == ids.index(sid) + 1
    fork_item = page.locator(f'.session-item[data-session-id="{fork_id}"]')
    expect(fork_item).to_have_class(re.compile(r"\bactive\b"))
    expect(fork_item).to_have_class(re.compile(r"\bforked\b"))
    expect(fork_item).to_have_attribute("data-forked-from", sid)
    expect(page.locator("#lineage")).to_have_attribute("href", f"/s/{sid}")
    # The fork has the parent's transcript and files, and goes on by itself.
    expect(page.locator("section.turn .bubble-user")).to_have_text("write keep.txt parent")
    assert workdir(shared_server, fork_id) == ["keep.txt"]
    page.fill("#composer-text", "write only-fork.txt x")
    page.press("#composer-text", "Enter")
    expect(page.locator("#transcript > section.turn")).to_have_count(2, timeout=TIMEOUT)
    wait_done(page)
    assert workdir(shared_server, fork_id) == ["keep.txt", "only-fork.txt"]
    assert workdir(shared_server, sid) == ["keep.txt"]
    page.screenshot(path="/tmp/timetravel-fork.png")


def test_resume_an_interrupted_run_in_place(page: Page, server_factory: Any) -> None:
    first = server_factory()
    sid = first.new_session()
    ws = first.socket(sid)
    try:
        run_id = ws.call("send_message", text="slow 400\nsay one two three four five six")[
            "data"]["run_id"]
        ws.event("message_delta")
    finally:
        ws.close()
    first.stop()  # the server stops mid-run: the run is INTERRUPTED
    again = server_factory(data_dir=first.data_dir)
    page.goto(f"{again.base_url}/login?token={again.token}")
    page.goto(f"{again.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "INTERRUPTED")
    turn.locator(".resume-btn").click()
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(page.locator("#transcript > section.turn")).to_have_count(1)  # the same turn
    expect(turn.locator(".md").last).to_have_text("one two three four five six")
    expect(turn.locator(".resume-btn")).to_have_count(0)
    expect(page.locator("#branch-badge")).to_have_text("main")
