"""Per-file revert and the three rewinds in real Chromium against a real server: each file
chip's own Revert then Redo (the chip shows its state, a reload too), and a user message's
Rewind menu: files and conversation, conversation only, files only (then Undo rewind). By
mouse, by keyboard, and at 390×844."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git

Server = Any  # the root conftest's `Server`
TIMEOUT = 15_000


def files(server: Server, session_id: str) -> dict[str, str]:
    root = Path(server.session_path(session_id)) / "workdir"
    return {p.relative_to(root).as_posix(): p.read_text()
            for p in sorted(root.rglob("*")) if p.is_file()}


def kind(server: Server, session_id: str) -> str:
    return git(Path(server.session_path(session_id)), "log", "-1",
               "--format=%(trailers:key=Braid-Kind,valueonly)").strip()


def chip_item(page: Page, run_id: str, path: str) -> Any:
    return page.locator(f"#footer-{run_id} li.chip-item").filter(
        has=page.locator(f".chip[data-path='{path}']"))


def test_each_chip_reverts_and_redoes_its_own_file(page: Page, login: Any,
                                                    shared_server: Server) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write a.txt one\nwrite b.txt two")
    tid = shared_server.run(sid, "write a.txt one more\ndelete b.txt\nwrite c.txt three")["run_id"]
    login(page, sid)
    expect(page.locator(f"#footer-{tid} .chip-act")).to_have_count(3)

    # c.txt's own Revert: only c.txt goes; the chip says it stands reverted.
    chip_item(page, tid, "c.txt").locator(".chip-act").click()
    item = chip_item(page, tid, "c.txt")
    expect(item).to_have_class(re.compile(r"\bchip-off\b"), timeout=TIMEOUT)
    expect(item.locator(".chip-act")).to_have_text("↷ Redo")
    expect(page.locator(f"#footer-{tid} .badge-partial")).to_have_text("1 of 3 reverted")
    expect(page.locator(f"#footer-{tid} .revert-btn")).to_have_text("↶ Revert the rest")
    assert files(shared_server, sid) == {"a.txt": "one more\n"}
    assert kind(shared_server, sid) == "revert"
    expect(chip_item(page, tid, "a.txt")).not_to_have_class(re.compile(r"\bchip-off\b"))
    # The note names the file for the reader (and the model).
    expect(page.locator(".note").last).to_contain_text("c.txt were reverted")
    page.screenshot(path="/tmp/rewind-chips.png")

    # By keyboard: a.txt's Revert, focused and pressed with Enter.
    chip_item(page, tid, "a.txt").locator(".chip-act").focus()
    page.keyboard.press("Enter")
    expect(chip_item(page, tid, "a.txt")).to_have_class(re.compile(r"\bchip-off\b"),
                                                        timeout=TIMEOUT)
    assert files(shared_server, sid) == {"a.txt": "one\n"}

    # A reload shows the same state, from git.
    page.reload()
    expect(chip_item(page, tid, "a.txt")).to_have_class(re.compile(r"\bchip-off\b"),
                                                        timeout=TIMEOUT)
    expect(chip_item(page, tid, "b.txt")).not_to_have_class(re.compile(r"\bchip-off\b"))
    expect(page.locator(f"#footer-{tid} .badge-partial")).to_have_text("2 of 3 reverted")

    # Redo c.txt alone.
    chip_item(page, tid, "c.txt").locator(".chip-act").click()
    expect(chip_item(page, tid, "c.txt")).not_to_have_class(re.compile(r"\bchip-off\b"),
                                                            timeout=TIMEOUT)
    expect(chip_item(page, tid, "c.txt").locator(".chip-act")).to_have_text("↶ Revert")
    assert files(shared_server, sid) == {"a.txt": "one\n", "c.txt": "three\n"}
    assert kind(shared_server, sid) == "unrevert"


def open_rewind(page: Page, run_id: str) -> Any:
    menu = page.locator(f"#turn-{run_id} .msg-user details.rewind-menu").first
    menu.locator("summary").click()
    pop = menu.locator(".rewind-pop")
    expect(pop).to_be_visible()
    return pop


def last_turn(page: Page) -> Any:
    return page.locator("#transcript > section.turn").last


def test_the_three_rewinds_from_a_user_message(page: Page, login: Any,
                                               shared_server: Server) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "write a.txt one")["run_id"]
    second = shared_server.run(sid, "write a.txt two\nwrite b.txt bee")["run_id"]
    login(page, sid)

    # Files only: the files go back to before the second message; the chat stays.
    turns_before = page.locator("#transcript > section.turn").count()
    open_rewind(page, second).locator(".rewind-files").click()
    rewound = page.locator(f"#turn-{second} .rewind .undo-rewind")
    expect(rewound).to_be_visible(timeout=TIMEOUT)
    expect(page.locator(f"#turn-{second} .rewind .badge-partial")).to_have_text(
        "Files rewound here")
    assert files(shared_server, sid) == {"a.txt": "one\n"}
    assert kind(shared_server, sid) == "revert"
    expect(page.locator("#transcript > section.turn")).to_have_count(turns_before)
    expect(page.locator(".note").last).to_contain_text("The files were rewound")
    # It survives a reload, and Undo rewind puts the files back.
    page.reload()
    expect(page.locator(f"#turn-{second} .rewind .undo-rewind")).to_be_visible(timeout=TIMEOUT)
    page.locator(f"#turn-{second} .rewind .undo-rewind").click()
    expect(page.locator(f"#turn-{second} .rewind .undo-rewind")).to_have_count(0,
                                                                               timeout=TIMEOUT)
    assert files(shared_server, sid) == {"a.txt": "two\n", "b.txt": "bee\n"}
    assert kind(shared_server, sid) == "unrevert"

    # Conversation only: a sibling run answering the first message again, today's files kept.
    open_rewind(page, first).locator(".rewind-talk").click()
    # The conversation rewound: the page shows the sibling's branch, without the 2nd turn.
    expect(page.locator(f"#turn-{second}")).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator(f"#turn-{first}")).to_have_count(0, timeout=TIMEOUT)
    sibling = last_turn(page)
    expect(sibling).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    talk_id = sibling.get_attribute("data-run-id")
    expect(page.locator("#branch-badge")).to_have_attribute("data-branch", f"run/{talk_id}")
    # b.txt (written by the second turn) is still there: the files were kept.
    assert files(shared_server, sid) == {"a.txt": "one\n", "b.txt": "bee\n"}

    # Files and conversation, from the first message on main again (by keyboard this time).
    sibling.locator(".switch-prev").click()
    expect(page.locator(f"#turn-{first}")).to_be_visible(timeout=TIMEOUT)
    menu = page.locator(f"#turn-{first} .msg-user details.rewind-menu").first
    menu.locator("summary").focus()
    page.keyboard.press("Enter")
    both = menu.locator(".rewind-both")
    expect(both).to_be_visible()
    both.focus()
    page.keyboard.press("Enter")
    expect(page.locator(f"#turn-{first}")).to_have_count(0, timeout=TIMEOUT)
    again = last_turn(page)
    expect(again).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    assert again.get_attribute("data-run-id") not in (first, second, talk_id)
    # From the checkpoint before the first message: b.txt is gone, a.txt written again.
    assert files(shared_server, sid) == {"a.txt": "one\n"}


def test_rewind_menu_and_chip_controls_fit_a_phone(page: Page, login: Any,
                                                   shared_server: Server) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sid = shared_server.new_session()
    tid = shared_server.run(sid, "write some/deeper/folder/a-long-file-name.txt one\n"
                                 "write b.txt two")["run_id"]
    login(page, sid)
    acts = page.locator(f"#footer-{tid} .chip-act")
    expect(acts).to_have_count(2)
    for i in range(2):
        box = acts.nth(i).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    pop = open_rewind(page, tid)
    box = pop.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert box["y"] >= 0 and box["y"] + box["height"] <= 844, box
    for name in (".rewind-both", ".rewind-talk", ".rewind-files"):
        expect(pop.locator(name)).to_be_in_viewport()
    page.screenshot(path="/tmp/rewind-phone.png")
    page.keyboard.press("Escape")
    expect(pop).to_be_hidden()
