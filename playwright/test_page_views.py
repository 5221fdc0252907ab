"""The page's readable surface in real Chromium against a real server: no hash in any label
that has a readable name (a scan of the page text), titles without a literal `\\n`, code
highlighted with a copy button, messages with copy, timestamps, model and tokens, "Show more";
and screenshots of the main views at a laptop's and a phone's size, saved under
playwright/screenshots/ for anyone to look at (not committed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

Server = Any
TIMEOUT = 20_000
SHOTS = Path(__file__).resolve().parent / "screenshots"
HASH = r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])"
SIZES = [pytest.param({"width": 1400, "height": 900}, id="laptop"),
         pytest.param({"width": 390, "height": 844}, id="phone")]


@pytest.fixture(scope="module")
def rich_session(shared_server: Server) -> dict[str, Any]:
    """A session with a revert, an edited rerun, a sub-agent, a merge and an upload."""
    srv = shared_server
    sid = srv.new_session()
    first = srv.run(sid, "write a.txt one\\ntwo\nsay wrote ```a.txt```")
    second = srv.run(sid, "write b.py x = 1")
    assert srv.api("POST", f"/api/turns/{second['run_id']}/revert",
                   {"session_id": sid})[0] == 200
    status, rerun = srv.api("POST", f"/api/runs/{first['run_id']}/continue",
                            {"session_id": sid, "continue_from": 0, "input": "say edited"})
    assert status == 200, rerun
    ws = srv.socket(sid)
    try:
        assert ws.call("checkout", ref="main")["type"] == "result"
    finally:
        ws.close()
    status, sub = srv.api("POST", f"/api/sessions/{sid}/sub_agents",
                          {"parent_turn_id": first["run_id"], "label": "alpha",
                           "prompt": "write c.txt c\nsay alpha done"})
    assert status == 200, sub
    status, merged = srv.api("POST", f"/api/sessions/{sid}/merge",
                             {"branches": [sub["branch"]], "message": "bring alpha in"})
    assert status == 200, merged
    answer = ["```python", "def hello():", "    return 'hi'", "```", ""]
    answer += [f"line {i} of a long message" for i in range(60)]
    srv.run(sid, "\n".join(f"say {line}" for line in answer))
    return {"sid": sid, "first": first["run_id"], "merge": merged["commit_id"]}


def visible_text(page: Page) -> str:
    return str(page.evaluate("document.body.innerText"))


@pytest.mark.parametrize("size", SIZES)
def test_no_hash_in_readable_labels(page: Page, login: Any, rich_session: dict[str, Any],
                                    size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    login(page, rich_session["sid"])
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(1, timeout=TIMEOUT)
    texts = [visible_text(page)]
    # The branch list and the merge node name the sub-agent and the edited run readably.
    branches = page.locator("#dag .dag-branch .branch-name")
    expect(branches.filter(has_text="sub-agent alpha")).to_be_visible()
    expect(page.locator("#dag .dag-branch .branch-name",
                        has_text=re.compile(r"^Edit of turn \d+$"))).to_be_visible()
    expect(page.locator(".note", has_text=re.compile(r"Turn \d+ was reverted"))).to_be_visible()
    page.locator("#dag .dag-node[data-kind=merge]").click()
    expect(page.locator("#dag-detail .dag-summary")).to_contain_text("sub-agent alpha",
                                                                     timeout=TIMEOUT)
    texts.append(visible_text(page))
    page.locator("#dag .dag-node[data-kind=fork]").first.click()
    expect(page.locator("#dag-detail .dag-summary")).to_be_visible(timeout=TIMEOUT)
    texts.append(visible_text(page))
    for text in texts:
        assert re.findall(HASH, text) == [], re.findall(rf".{{0,40}}{HASH}.{{0,20}}", text)
        assert "run/" not in text and "sub_" not in text
    # Titles and labels never show a literal \n (the first message had one).
    labels = page.locator("#session-title, #session-list, #dag .dag-label, #dag .dag-branch")
    for label in labels.all_inner_texts():
        assert "\\n" not in label, label
    expect(page.locator("#session-title")).to_have_text("write a.txt one two")
    # The hash is still there, on hover.
    title = page.locator("#dag .dag-branch[data-branch^=sub_]").get_attribute("title")
    assert title and title.startswith("sub_")


def test_code_copy_timestamps_tokens_and_show_more(page: Page, login: Any,
                                                   rich_session: dict[str, Any]) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.set_viewport_size({"width": 1400, "height": 900})
    login(page, rich_session["sid"])
    last = page.locator("#transcript > section.turn").last
    code = last.locator(".md pre.hl")
    expect(code.locator(".k").first).to_have_text("def")  # Pygments on the server
    expect(code.locator(".nf")).to_have_text("hello")
    code.hover()
    code.locator(".copy-code").click()
    expect(code.locator(".copy-code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "def hello():\n    return 'hi'"
    # The message's own copy button copies the whole answer.
    last.locator(".answer-meta .copy-btn").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("def hello():") and "line 59 of a long message" in copied
    # Timestamps: relative, exact on hover; the run's model and tokens.
    stamp = last.locator(".turn-meta time.ts")
    expect(stamp).to_have_text(re.compile(r"just now|\d+ min ago"))
    assert re.search(r"\d{4}", stamp.get_attribute("title") or "")
    expect(last.locator(".turn-usage .turn-model")).to_have_text("demo")
    expect(last.locator(".turn-usage")).to_have_text(re.compile(r"^demo ≈?\d+ tokens$"))
    expect(page.locator(".msg-user time.ts").first).to_be_visible()
    # The long answer is collapsed behind "Show more".
    block = last.locator(".md.collapsible")
    height = block.bounding_box()["height"]  # type: ignore[index]
    more = last.locator(".bubble-assistant .show-more")
    more.click()
    expect(more).to_have_text("Show less")
    assert block.bounding_box()["height"] > height * 1.4  # type: ignore[index]
    # A diff is highlighted too.
    page.locator(f"#turn-{rich_session['first']} .chip[data-path='a.txt']").first.click()
    expect(page.locator(f"#diff-{rich_session['first']} .dl-add").first).to_be_visible(
        timeout=TIMEOUT)


@pytest.mark.parametrize("size", SIZES)
def test_screenshots_of_the_main_views(page: Page, login: Any, rich_session: dict[str, Any],
                                       size: dict[str, int], request: Any) -> None:
    SHOTS.mkdir(exist_ok=True)
    tag = request.node.callspec.id
    page.set_viewport_size(size)
    login(page, rich_session["sid"])
    expect(page.locator("#transcript section.turn").first).to_be_visible()
    page.screenshot(path=str(SHOTS / f"chat-{tag}.png"))
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    page.locator("#dag .dag-node[data-kind=merge]").click()
    expect(page.locator("#dag-detail .dag-summary")).to_be_visible(timeout=TIMEOUT)
    page.screenshot(path=str(SHOTS / f"history-{tag}.png"))
    page.click("[data-toggle-dag]") if size["width"] < 700 else None
    page.click("#open-files")
    page.locator("#files-panel .files-entry[data-path='a.txt'] .files-open").click()
    expect(page.locator("#file-view .file-code")).to_be_visible(timeout=TIMEOUT)
    page.screenshot(path=str(SHOTS / f"files-{tag}.png"))
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    page.click("#session-actions > summary")
    page.screenshot(path=str(SHOTS / f"session-menu-{tag}.png"))
    for name in ("chat", "history", "files", "session-menu"):
        assert (SHOTS / f"{name}-{tag}.png").stat().st_size > 5000


def test_a_forked_session_names_its_source_without_a_hash(page: Page, login: Any,
                                                          rich_session: dict[str, Any],
                                                          shared_server: Server) -> None:
    status, made = shared_server.api("POST", f"/api/sessions/{rich_session['sid']}/fork")
    assert status == 201, made
    page.set_viewport_size({"width": 1400, "height": 900})
    login(page, made["session_id"])
    expect(page.locator("#dag .dag-node[data-kind=fork]").first).to_be_visible(timeout=TIMEOUT)
    expect(page.locator("#dag .dag-label", has_text="Fork of another session").first) \
        .to_be_visible()
    text = visible_text(page)
    assert re.findall(HASH, text) == [], re.findall(rf".{{0,40}}{HASH}.{{0,20}}", text)
