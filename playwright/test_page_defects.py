"""The page's defects of issue 29, each as a daily user meets it, in real Chromium against a
real server: a long answer that ends stays open where it is read; the demo's `say` keeps its
line breaks; toasts do not pile up; a one-file turn has one Revert; the laptop's top bar keeps
one line; a search result opened on a phone keeps the header in view; the phone's History
sheet has a way out; Resume on an earlier interrupted turn keeps the turns after it, and is
spent once used."""

from __future__ import annotations

import dataclasses
import re
import signal
from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 30_000
LAPTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


def test_a_long_answer_does_not_fold_when_it_ends(page: Page, login: Any, shared_server: Server,
                                                  console_errors: Any) -> None:
    page.set_viewport_size(LAPTOP)
    sid = shared_server.new_session()
    login(page, sid)
    words = " ".join(f"word{i}" for i in range(600))  # ~5,000 characters: "long"
    run_id = send_from_page(page, "slow 2\nsay " + words)
    turn = page.locator(f"#turn-{run_id}")
    page.wait_for_function("""(id) => {
        const live = document.getElementById('live-' + id);
        return live && live.textContent.includes('word300');
    }""", arg=run_id, timeout=TIMEOUT)
    streamed = page.evaluate("(id) => document.getElementById('live-' + id).offsetHeight", run_id)
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    block = turn.locator(".md.collapsible")
    # Shown whole (nothing cut off under a fold), at least as tall as it was while streaming.
    assert block.evaluate("el => el.scrollHeight - el.clientHeight") <= 1
    assert block.evaluate("el => el.offsetHeight") >= streamed
    expect(turn.locator(".md")).to_contain_text("word599")
    # Folding is the reader's choice: Show less, then Show more.
    more = turn.locator(".bubble-assistant .show-more")
    expect(more).to_have_text("Show less")
    more.click()
    expect(more).to_have_text("Show more")
    assert block.evaluate("el => el.scrollHeight - el.clientHeight") > 100


def test_say_keeps_its_line_breaks(page: Page, login: Any, shared_server: Server,
                                   console_errors: Any) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    run_id = send_from_page(page, "say first paragraph\\n\\nsecond paragraph", until_done=True)
    paragraphs = page.locator(f"#turn-{run_id} .md p")
    expect(paragraphs).to_have_count(2)
    expect(paragraphs.nth(1)).to_have_text("second paragraph")


def send_bad_action(page: Page, action: str) -> None:
    """A refused action, sent as a button of the page would send it: the server answers
    with an error toast."""
    page.evaluate("""(action) => {
        const form = document.createElement('form');
        form.setAttribute('ws-send', '');
        form.innerHTML = '<input type="hidden" name="action">';
        form.elements.action.value = action;
        document.getElementById('app').append(form);
        htmx.process(form);
        htmx.trigger(form, 'submit');
        form.remove();
    }""", action)


def test_toasts_do_not_pile_up(page: Page, login: Any, shared_server: Server,
                               console_errors: Any) -> None:
    sid = shared_server.new_session()
    login(page, sid)
    # The most toasts ever shown at once (counted as they come, whatever the machine's speed).
    page.evaluate("""() => {
        const box = document.getElementById('toasts');
        window.mostToasts = 0;
        new MutationObserver(() => {
            window.mostToasts = Math.max(window.mostToasts, box.querySelectorAll('.toast').length);
        }).observe(box, {childList: true});
    }""")
    toasts = page.locator("#toasts .toast")
    for _ in range(4):  # the same error four times: one toast says it
        send_bad_action(page, "frobnicate")
        expect(toasts.first).to_contain_text("frobnicate", timeout=TIMEOUT)
    assert page.evaluate("window.mostToasts") == 1
    for i in range(5):  # five other errors: at most three at once, the newest kept
        send_bad_action(page, f"frob{i}")
        expect(toasts.last).to_contain_text(f"frob{i}", timeout=TIMEOUT)
    assert 1 <= page.evaluate("window.mostToasts") <= 3
    # They go by themselves, soon: nothing stays over the controls under them.
    expect(toasts).to_have_count(0, timeout=10_000)


def test_a_one_file_turn_has_one_revert_button(page: Page, login: Any, shared_server: Server,
                                               console_errors: Any) -> None:
    sid = shared_server.new_session()
    one = shared_server.run(sid, "write a.txt one")["run_id"]
    two = shared_server.run(sid, "write b.txt two\nwrite c.txt three")["run_id"]
    login(page, sid)
    expect(page.locator(f"#footer-{one} .revert-btn")).to_have_count(1)
    expect(page.locator(f"#footer-{one} .chip-act")).to_have_count(0)
    expect(page.locator(f"#footer-{two} .chip-act")).to_have_count(2)  # one per file there


def test_the_top_bar_keeps_one_line_on_a_laptop(page: Page, login: Any, shared_server: Server,
                                                console_errors: Any) -> None:
    page.set_viewport_size(LAPTOP)
    sid = shared_server.new_session()
    first = shared_server.run(sid, "say hello there")["run_id"]
    shared_server.run(sid, "say second")
    login(page, sid)
    expect(page.locator("#dag-panel")).not_to_have_class("collapsed")
    # On a sibling branch (Edit & rerun): its name joins the bar.
    page.locator(f"#turn-{first} details.edit-rerun > summary").click()
    page.locator(f"#turn-{first} details.edit-rerun textarea").fill("say edited hello")
    page.locator(f"#turn-{first} details.edit-rerun button[type=submit]").first.click()
    expect(page.locator("#branch-badge")).to_contain_text("Edit", timeout=TIMEOUT)
    rows = page.evaluate("""() => {
        const tops = new Set();
        for (const el of document.querySelector('.topbar').children) {
            const r = el.getBoundingClientRect();
            if (r.width && r.height) tops.add(Math.round(r.top + r.height / 2));
        }
        return [...tops];
    }""")
    assert max(rows) - min(rows) <= 4, rows  # every item's middle on one line
    title = page.locator("#session-title").bounding_box()
    assert title and title["width"] > 120  # the title is not squeezed to nothing


def test_a_search_link_on_a_phone_keeps_the_header(page: Page, login: Any, shared_server: Server,
                                                   console_errors: Any) -> None:
    page.set_viewport_size(PHONE)
    sid = shared_server.new_session()
    first = shared_server.run(sid, "say the first turn")["run_id"]
    for i in range(8):
        shared_server.run(sid, f"say turn {i} " + "filler " * 40)
    login(page, shared_server.new_session())  # the link opens the session anew
    page.goto(f"{shared_server.base_url}/s/{sid}#turn-{first}")
    turn = page.locator(f"#turn-{first}")
    expect(turn).to_have_class("turn turn-found", timeout=TIMEOUT)
    page.wait_for_timeout(300)
    expect(turn).to_be_in_viewport()
    # The page itself did not scroll: the header is in view, no blank band under the composer.
    assert page.evaluate("() => document.scrollingElement.scrollTop") == 0
    assert page.evaluate("() => document.querySelector('.main').scrollTop") == 0
    box = page.locator(".topbar").bounding_box()
    assert box and box["y"] >= 0
    expect(page.locator(".sidebar-toggle")).to_be_in_viewport()
    composer = page.locator(".composer-wrap").bounding_box()
    assert composer and composer["y"] + composer["height"] >= 844 - 2


def test_the_phone_history_sheet_has_a_way_out(page: Page, login: Any, shared_server: Server,
                                               console_errors: Any) -> None:
    page.set_viewport_size(PHONE)
    sid = shared_server.new_session()
    shared_server.run(sid, "say hello")
    login(page, sid)
    panel = page.locator("#dag-panel")
    opener = page.locator("#dag-panel .dag-toggle")

    def open_sheet() -> None:
        opener.click()
        expect(panel).not_to_have_class("dag-panel collapsed")

    open_sheet()
    close = page.locator("#dag-panel .dag-close-sheet")
    expect(close).to_be_visible()
    expect(close).to_have_text("Close")
    close.click()
    expect(panel).to_have_class("dag-panel collapsed")
    open_sheet()
    page.keyboard.press("Escape")
    expect(panel).to_have_class("dag-panel collapsed")
    open_sheet()
    page.mouse.click(20, 500)  # the page beside the sheet
    expect(panel).to_have_class("dag-panel collapsed")


def test_the_header_follows_the_branch_shown(page: Page, login: Any, shared_server: Server,
                                             console_errors: Any) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "say hello")["run_id"]
    second = shared_server.run(sid, "say a short one")["run_id"]
    login(page, sid)
    tokens = page.locator("#session-tokens")
    expect(tokens).to_have_text(re.compile(r"\d+ tokens"), timeout=TIMEOUT)
    on_main = tokens.inner_text()
    # The first turn named the session: the ⋯ menu's Name says so.
    name = page.locator("#session-title").inner_text()
    page.click(".session-menu-btn")
    expect(page.locator("#rename-input")).to_have_value(name)
    page.keyboard.press("Escape")
    # Edit & rerun with a much longer answer: the header counts the new branch's tokens.
    turn = page.locator(f"#turn-{second}")
    turn.locator(".msg-user details.edit-rerun > summary").click()
    turn.locator(".msg-user details.edit-rerun textarea").fill("say " + "many words " * 200)
    turn.locator(".msg-user details.edit-rerun button[type=submit]").click()
    # The edited turn: neither the first turn (the last one shown for a moment while the edit
    # starts: a COMPLETED turn too early) nor the one edited.
    edited = page.locator(f'#transcript > section.turn:not([data-run-id="{first}"])'
                          f':not([data-run-id="{second}"])')
    expect(edited).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(tokens).not_to_have_text(on_main, timeout=TIMEOUT)
    on_edit = tokens.inner_text()
    # ‹ shows main again, and its count; › the edit's.
    edited.locator(".switch-prev").click()
    expect(page.locator(f"#turn-{second}")).to_be_visible(timeout=TIMEOUT)
    expect(tokens).to_have_text(on_main, timeout=TIMEOUT)
    page.locator(f"#turn-{second} .switch-next").click()
    expect(tokens).to_have_text(on_edit, timeout=TIMEOUT)
    page.click(".session-menu-btn")
    expect(page.locator("#rename-input")).to_have_value(page.locator("#session-title").inner_text())


def test_a_conflict_on_a_sibling_branch_names_it_for_people(
        page: Page, login: Any, shared_server: Server, console_errors: Any) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "say hi")["run_id"]
    login(page, sid)
    turn = page.locator(f"#turn-{first}")
    turn.locator(".msg-user details.edit-rerun > summary").click()
    turn.locator(".msg-user details.edit-rerun textarea").fill("say hi again")
    turn.locator(".msg-user details.edit-rerun button[type=submit]").click()
    edited = page.locator("#transcript > section.turn").last
    expect(edited).not_to_have_attribute("data-run-id", first, timeout=TIMEOUT)
    expect(edited).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(page.locator("#branch-badge")).to_have_attribute("data-branch", re.compile("^run/"))
    shared_server.spawn_conflicting(sid, str(edited.get_attribute("data-run-id")))
    rows = page.locator("#dag .dag-branch[data-branch^=sub_]")
    expect(rows).to_have_count(2, timeout=TIMEOUT)
    for i in range(2):
        rows.nth(i).locator("input[type=checkbox]").check()
    page.click("#merge-btn")
    conflicts = page.locator("#dag-conflicts")
    expect(conflicts).to_contain_text("same.txt", timeout=TIMEOUT)
    expect(conflicts).to_contain_text("Edit of")  # the branch merged into, by its name
    assert "run/" not in conflicts.inner_text()  # never its hash (only on hover)


def interrupted_mid_answer(page: Page, server_factory: Any, sig: int = signal.SIGTERM,
                           seen: str = "streamed3", later_text: str = "say after the restart"
                           ) -> tuple[Any, str, str]:
    """A server stopped (`sig`) once the page watched `seen` stream, started again, and a
    turn (`later_text`) run after the restart: (the new server, the interrupted run's id, the
    later run's id)."""
    srv = server_factory()
    sid = srv.new_session()
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    page.fill("#composer-text", "slow 300\nsay " + " ".join(f"streamed{i}" for i in range(40)))
    page.press("#composer-text", "Enter")
    turn = page.locator("#transcript > section.turn").last
    expect(turn.locator(".live")).to_contain_text(seen, timeout=TIMEOUT)
    run_id = str(turn.get_attribute("data-run-id"))
    srv.stop(sig)
    again = dataclasses.replace(srv, proc=None)
    again.start()
    later = again.run(sid, later_text)["run_id"]
    page.reload()
    expect(page.locator(f"#turn-{later}")).to_have_attribute("data-status", "COMPLETED",
                                                             timeout=TIMEOUT)
    return again, run_id, later


def test_an_interrupted_run_keeps_what_streamed(page: Page, server_factory: Any,
                                                console_errors: Any) -> None:
    console_errors.allow_server_down()
    srv, run_id, _ = interrupted_mid_answer(page, server_factory)
    try:
        back = page.locator(f"#turn-{run_id}")
        expect(back).to_have_attribute("data-status", "INTERRUPTED")
        expect(back.locator(".md.partial")).to_contain_text("streamed0 streamed1 streamed2")
    finally:
        srv.stop()



def test_a_killed_server_keeps_what_streamed(page: Page, server_factory: Any,
                                            console_errors: Any) -> None:
    """kill -9 mid-answer: the text so far was made durable as it streamed (at most once a
    second, turns._PartialSaver); by "streamed8" (each word 300 ms apart) it has been."""
    console_errors.allow_server_down()
    srv, run_id, _ = interrupted_mid_answer(page, server_factory, signal.SIGKILL, "streamed8")
    try:
        back = page.locator(f"#turn-{run_id}")
        expect(back).to_have_attribute("data-status", "INTERRUPTED")
        expect(back.locator(".md.partial")).to_contain_text("streamed0 streamed1 streamed2")
    finally:
        srv.stop()


def test_resume_of_an_earlier_turn_keeps_the_later_ones(page: Page, server_factory: Any,
                                                        console_errors: Any) -> None:
    """Resume on an interrupted turn that is not the last goes on at the branch's end, on the
    same branch: the later turn and its file stay in the chat and the workdir, and no
    `‹ 2/2 ›` appears (it used to fork at the interrupted turn and leave them behind)."""
    console_errors.allow_server_down()
    srv, run_id, later = interrupted_mid_answer(page, server_factory,
                                                later_text="write later.txt made later")
    sid = page.url.rsplit("/s/", 1)[1].split("?")[0].split("#")[0]
    try:
        back = page.locator(f"#turn-{run_id}")
        expect(back).to_have_attribute("data-status", "INTERRUPTED")
        back.locator(".resume-btn").click()
        last = page.locator("#transcript > section.turn").last
        expect(last).not_to_have_attribute("data-run-id", later, timeout=TIMEOUT)
        expect(last).to_have_attribute("data-status", "COMPLETED", timeout=60_000)
        expect(last.locator(".bubble-assistant .md").last).to_contain_text("streamed39")
        # The later turn and its file are still where they were, with the interrupted one.
        expect(page.locator(f"#turn-{later}")).to_be_visible()
        expect(page.locator(f"#turn-{later} .chip[data-path='later.txt']")).to_be_visible()
        expect(back).to_be_visible()
        expect(page.locator(".switcher")).to_have_count(0)
        turns = page.locator("#transcript > section.turn")
        ids = [turns.nth(i).get_attribute("data-run-id") for i in range(turns.count())]
        assert ids.index(run_id) < ids.index(later) < len(ids) - 1, ids
        work = srv.session_path(sid) / "workdir"
        assert (work / "later.txt").read_text() == "made later\n"
        page.reload()  # and so they are read back from git
        expect(page.locator(f"#turn-{later} .chip[data-path='later.txt']")).to_be_visible(
            timeout=TIMEOUT)
        expect(page.locator(".switcher")).to_have_count(0)
    finally:
        srv.stop()


def test_a_resumed_earlier_turn_offers_no_second_resume(page: Page, server_factory: Any,
                                                        console_errors: Any) -> None:
    """Once an earlier interrupted turn is resumed (a new run at the branch's end), its
    ▶ Resume is gone: on this tab, on another tab open on the session (by the event the
    resume publishes), after a reload mid-answer (the new run not yet committed) and after
    one once it ended (read back from git). A second click used to start a second run."""
    console_errors.allow_server_down()
    srv, run_id, later = interrupted_mid_answer(page, server_factory)
    sid = page.url.rsplit("/s/", 1)[1].split("?")[0].split("#")[0]
    other = page.context.new_page()
    try:
        other.goto(f"{srv.base_url}/s/{sid}")
        expect(other.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
        resume = f"#turn-{run_id} .resume-btn"
        expect(page.locator(resume)).to_have_count(1)
        expect(other.locator(resume)).to_have_count(1)
        page.locator(resume).click()
        last = page.locator("#transcript > section.turn").last
        expect(last).not_to_have_attribute("data-run-id", later, timeout=TIMEOUT)
        expect(last.locator(".live")).to_contain_text("streamed", timeout=TIMEOUT)
        new_run = str(last.get_attribute("data-run-id"))
        assert new_run not in (run_id, later)
        expect(page.locator(resume)).to_have_count(0)
        expect(other.locator(f"#turn-{new_run}")).to_be_visible(timeout=TIMEOUT)
        expect(other.locator(resume)).to_have_count(0)
        expect(other.locator(f"#turn-{run_id}")).to_have_attribute("data-status",
                                                                   "INTERRUPTED")
        other.reload()  # mid-answer: the resuming run is live, nothing of it committed yet
        expect(other.locator(f"#turn-{new_run} .live")).to_be_visible(timeout=TIMEOUT)
        expect(other.locator(f"#turn-{run_id}")).to_be_visible()
        expect(other.locator(resume)).to_have_count(0)
        expect(last).to_have_attribute("data-status", "COMPLETED", timeout=60_000)
        page.reload()  # read back from git
        expect(page.locator(f"#turn-{new_run}")).to_have_attribute("data-status", "COMPLETED",
                                                                   timeout=TIMEOUT)
        expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status",
                                                                  "INTERRUPTED")
        expect(page.locator(resume)).to_have_count(0)
        expect(page.locator(".resume-btn")).to_have_count(0)
        turns = page.locator("#transcript > section.turn")
        ids = [turns.nth(i).get_attribute("data-run-id") for i in range(turns.count())]
        assert ids == [run_id, later, new_run], ids  # one continuation, not two
    finally:
        other.close()
        srv.stop()


def test_a_stopped_sub_agents_file_is_not_merged(page: Page, login: Any, shared_server: Server,
                                                 console_errors: Any) -> None:
    page.set_viewport_size(LAPTOP)
    sid = shared_server.new_session()
    login(page, sid)
    parent = send_from_page(page, "spawn quick: write quick.txt q\n"
                            "spawn long: write long.txt L\\nslow 300\\nsay "
                            + " ".join(f"long{i}" for i in range(100)) + "\nmerge theirs")
    bubble = page.locator(f"#turn-{parent}")
    long_card = bubble.locator(".sub-card", has=page.locator(".sub-label", has_text="long"))
    expect(long_card.locator(".sub-preview")).to_contain_text("long1", timeout=TIMEOUT)
    long_card.get_by_role("button", name="Stop sub-agent long").click()
    expect(long_card).to_have_attribute("data-status", "CANCELLED", timeout=TIMEOUT)
    expect(bubble).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(1, timeout=TIMEOUT)
    # The Files panel and the workdir hold the finished child's file, not the stopped one's.
    page.click("#open-files")
    files = page.locator("#files-panel")
    expect(files.locator(".files-entry[data-path='quick.txt']")).to_be_visible(timeout=TIMEOUT)
    expect(files.locator(".files-entry[data-path='long.txt']")).to_have_count(0)
    workdir = shared_server.session_path(sid) / "workdir"
    assert (workdir / "quick.txt").read_text().strip() == "q"
    assert not (workdir / "long.txt").exists()
