"""The sidebar's search box and dates in real Chromium (DESIGN §8): it finds words in
messages (title and escaped snippet, the match marked) and a click jumps to the turn, even one
older than the newest 30 the page shows; each session shows when it was last active."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

Server = Any
TIMEOUT = 15_000


def long_session(srv: Server, first: str, turns: int = 36) -> tuple[str, list[str]]:
    sid = srv.new_session()
    runs = [srv.run(sid, first)["run_id"]]
    for i in range(1, turns):
        runs.append(srv.run(sid, f"say turn {i}")["run_id"])
    return sid, runs


def search_for(page: Page, words: str) -> Any:
    page.fill("#sidebar input.search", words)
    hits = page.locator("#search-hits .search-hit")
    expect(hits.first.locator("mark").first).to_have_text(words, timeout=TIMEOUT)
    return hits


def test_search_jumps_to_an_old_turn_in_another_session(page: Page, shared_server: Server,
                                                        login: Any, console_errors: Any) -> None:
    sid, runs = long_session(shared_server, "say the narwhal <img src=x onerror=alert(1)> sings")
    here = shared_server.new_session()
    shared_server.run(here, "say somewhere else")
    login(page, here)
    hits = search_for(page, "narwhal")
    expect(hits).to_have_count(2)  # the question and the answer
    hit = hits.first
    expect(hit.locator(".search-hit-title")).to_have_text(
        "say the narwhal <img src=x onerror=alert(1)> sings")
    expect(hit.locator("mark")).to_have_text("narwhal")
    expect(hit.locator(".search-hit-snippet")).to_contain_text("<img src=x onerror=alert(1)>")
    expect(page.locator("#search-hits img")).to_have_count(0)  # escaped, never markup
    hit.click()
    # The other session opens at the found turn: the first, older than the newest 30 shown.
    page.wait_for_url(re.compile(f"/s/{sid}#turn-{runs[0]}$"))
    turn = page.locator(f"#turn-{runs[0]}")
    expect(turn).to_have_class(re.compile("turn-found"), timeout=TIMEOUT)
    expect(turn).to_be_in_viewport()
    expect(page.locator("#transcript section.turn")).to_have_count(36)
    page.wait_for_timeout(500)  # and stays there (the view does not follow the end)
    expect(turn).to_be_in_viewport()


def test_search_jumps_within_the_session_shown(page: Page, shared_server: Server,
                                               login: Any, console_errors: Any) -> None:
    sid, runs = long_session(shared_server, "say a quetzal flies by", turns=34)
    shared_server.run(sid, "say the newest dugong")
    login(page, sid)
    turns = page.locator("#transcript section.turn")
    expect(turns).to_have_count(30, timeout=TIMEOUT)
    expect(page.locator(f"#turn-{runs[0]}")).to_have_count(0)  # paged out
    search_for(page, "quetzal").first.click()
    turn = page.locator(f"#turn-{runs[0]}")
    expect(turn).to_have_class(re.compile("turn-found"), timeout=TIMEOUT)
    expect(turn).to_be_in_viewport()
    assert page.url.endswith(f"/s/{sid}#turn-{runs[0]}")
    # The newest turn: already shown, scrolled to and marked, the old one no longer.
    search_for(page, "dugong").first.click()
    newest = turns.last
    expect(newest).to_have_class(re.compile("turn-found"))
    expect(turn).not_to_have_class(re.compile("turn-found"))
    # No match: said so.
    page.fill("#sidebar input.search", "nothingmatchesthisword")
    expect(page.locator("#search-hits")).to_contain_text("No messages match.", timeout=TIMEOUT)


def test_sidebar_shows_when_each_session_was_last_active(page: Page, shared_server: Server,
                                                         login: Any,
                                                         console_errors: Any) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "say hello")
    login(page, sid)
    when = page.locator(f'#session-list a[data-session-id="{sid}"] time.last-active')
    expect(when).to_be_visible()
    # Active today: the time of day in the reader's zone; the exact date and time on hover.
    expect(when).to_have_text(re.compile(r"^\d{1,2}:\d{2}( ?[AP]M)?$"))
    title = when.get_attribute("title") or ""
    assert re.search(r"\d{4}", title) and re.search(r"\d{1,2}:\d{2}:\d{2}", title), title
    # Earlier days, as people say them: "Yesterday", then a date.
    words = page.evaluate("""() => {
        const t = document.createElement('time');
        t.className = 'last-active';
        const d = new Date(); d.setDate(d.getDate() - 1); d.setHours(12);
        t.setAttribute('datetime', d.toISOString());
        const u = t.cloneNode();
        u.setAttribute('datetime', '2020-03-05T10:00:00Z');
        document.getElementById('session-list').append(t, u);
        document.dispatchEvent(new Event('htmx:afterSettle'));  // search.js refreshes the dates
        return [t.textContent, u.textContent];
    }""")
    assert words[0] == "Yesterday" and "2020" in words[1], words


def test_search_on_a_phone_closes_the_drawer_at_the_turn(page: Page, shared_server: Server,
                                                         login: Any,
                                                         console_errors: Any) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sid, runs = long_session(shared_server, "say an axolotl smiles", turns=8)
    login(page, sid)
    page.click("[data-toggle-sidebar]")
    expect(page.locator("body")).to_have_class(re.compile("sidebar-open"))
    hit = search_for(page, "axolotl").first
    expect(hit).to_be_in_viewport()
    hit.click()
    expect(page.locator("body")).not_to_have_class(re.compile("sidebar-open"))
    turn = page.locator(f"#turn-{runs[0]}")
    expect(turn).to_have_class(re.compile("turn-found"), timeout=TIMEOUT)
    expect(turn).to_be_in_viewport()


def test_search_shows_a_sibling_run_on_its_branch(page: Page, shared_server: Server,
                                                  login: Any, console_errors: Any) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "say hello there")["run_id"]
    status, sibling = shared_server.api("POST", f"/api/runs/{first}/continue", {
        "session_id": sid, "continue_from": 0, "input": "say a tapir on the side",
        "fork": True})
    assert status == 200, sibling
    ws = shared_server.socket(sid)
    assert ws.call("checkout", ref="main")["type"] == "result"
    ws.close()
    login(page, sid)
    expect(page.locator("#branch-badge")).to_have_attribute("data-branch", "main")
    search_for(page, "tapir").first.click()
    turn = page.locator(f"#turn-{sibling['run_id']}")
    expect(turn).to_have_class(re.compile("turn-found"), timeout=TIMEOUT)
    expect(turn).to_be_in_viewport()
    expect(page.locator("#branch-badge")).to_have_attribute("data-branch", sibling["branch"])
