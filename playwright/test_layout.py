"""Every control in view and uncovered, at a phone's (390×844) and a laptop's (1400×900) size,
in each state of the page (issue 23), in real Chromium against a real server: a session on
main, on a sibling branch, a fork, an archived one, with the History panel open, with its
merge conflicts, with the ⋯ menu open, with the Files dialog, with toasts.

In each state, each visible control of the parts that state shows is inside the window and is
the element at its own centre (`document.elementFromPoint`, nothing covers it); the header's
items do not overlap one another; the title is visible (not squeezed to nothing); "Fork
session" is on one line; nothing but the header and the transcript sits between them. Error
toasts go once a later turn succeeds. Set BRAID_SHOTS=DIR to keep a screenshot of each."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 20_000
SIZES = [pytest.param({"width": 1400, "height": 900}, id="laptop"),
         pytest.param({"width": 390, "height": 844}, id="phone")]
TITLE = "Weekly report on the garden project"
HEADER = [".topbar", "#dag-panel .dag-head", ".composer-wrap"]

CHECK = """(roots) => {
  const problems = [];
  const W = innerWidth, H = innerHeight;
  const CONTROLS = "button, a[href], select, input:not([type=hidden]), textarea, summary";
  const label = (el) => (el.id ? "#" + el.id : el.tagName.toLowerCase() + "." + el.className)
    + " «" + (el.textContent || el.value || el.getAttribute("aria-label") || "").trim()
      .slice(0, 30) + "»";
  const seen = new Set();
  for (const sel of roots) {
    for (const root of document.querySelectorAll(sel)) {
      if (!root.checkVisibility()) continue;
      const all = [root, ...root.querySelectorAll(CONTROLS)].filter(el => el.matches(CONTROLS));
      for (const el of all) {
        if (seen.has(el)) continue;
        if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;
        if (el.closest(".sr-only, [hidden]")) continue;
        seen.add(el);
        const r = el.getBoundingClientRect();
        if (r.width < 1 || r.height < 1) continue;
        if (r.left < -0.5 || r.top < -0.5 || r.right > W + 0.5 || r.bottom > H + 0.5) {
          problems.push("outside the window: " + label(el) + " "
            + JSON.stringify([r.left, r.top, r.right, r.bottom]));
          continue;
        }
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        const labelled = el.labels && Array.from(el.labels).some(l => l.contains(hit));
        if (!hit || !(hit === el || el.contains(hit) || labelled)) {
          problems.push("covered: " + label(el) + " by " + (hit ? label(hit) : "nothing"));
        }
      }
    }
  }
  // Readable words only: a branch or run id in visible text (ids stay on hover, in titles).
  const ID = /\\b(sub_[0-9a-f]{6,}\\w*|run[-\\/][0-9a-f]{6,})/g;
  const ids = (document.body.innerText || "").match(ID);
  if (ids) problems.push("ids in visible text: " + Array.from(new Set(ids)).join(", "));
  return problems;
}"""

HEAD_ITEMS = """() => {
  const problems = [];
  const items = ["#session-title", "#branch-badge", "#lineage", "#fork-session", "#open-files",
    ".session-menu-btn", "#restore-session", ".badge-archived", "#model-select", "#session-tokens",
    ".instructions-chip",
    "#conn", ".sidebar-toggle", "body.dag-collapsed #dag-panel .dag-toggle"]
    .flatMap(s => Array.from(document.querySelectorAll(s)))
    .filter(el => el.checkVisibility() && el.getBoundingClientRect().width > 0);
  const name = (el) => el.id || el.className;
  for (let i = 0; i < items.length; i++) {
    for (let j = i + 1; j < items.length; j++) {
      if (items[i].contains(items[j]) || items[j].contains(items[i])) continue;
      const a = items[i].getBoundingClientRect(), b = items[j].getBoundingClientRect();
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 0.5 && h > 0.5) problems.push("overlap: " + name(items[i]) + " / " + name(items[j]));
    }
  }
  const title = document.getElementById("session-title");
  const t = title.getBoundingClientRect();
  if (!title.checkVisibility() || t.width < Math.min(title.scrollWidth, 100))
    problems.push("title squeezed to " + t.width + " px: " + title.textContent);
  const fork = document.querySelector("#fork-session .fork-label");
  if (fork && fork.checkVisibility() && fork.getClientRects().length > 1)
    problems.push("Fork session wraps");
  const bar = document.querySelector(".topbar").getBoundingClientRect();
  const next = document.querySelector(".source-bar:not([hidden])")
    || document.getElementById("transcript");
  const gap = next.getBoundingClientRect().top - bar.bottom;
  if (Math.abs(gap) > 1) problems.push("a band of " + gap + " px under the header");
  return problems;
}"""


def check(page: Page, roots: list[str], shot: str, header: bool = True) -> None:
    page.wait_for_timeout(250)  # transitions (the phone's panels slide in) come to rest
    shots = os.environ.get("BRAID_SHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        size = page.viewport_size or {}
        page.screenshot(path=f"{shots}/{shot}-{size.get('width')}.png")
    problems = page.evaluate(CHECK, roots)
    if header:
        problems += page.evaluate(HEAD_ITEMS)
    assert not problems, f"{shot}: " + "; ".join(problems)


def open_history(page: Page) -> None:
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    expect(page.locator("#dag-body")).to_be_visible()
    expect(page.locator("#dag .dag-branch").first).to_be_visible(timeout=TIMEOUT)


def close_history(page: Page) -> None:
    if page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    expect(page.locator("#dag-body")).to_be_hidden()


def titled_session(server: Server, first: str = "write notes/a.txt hello\nsay done"
                   ) -> tuple[str, str]:
    sid = server.new_session()
    run_id = server.run(sid, first)["run_id"]
    status, body = server.api("PATCH", f"/api/sessions/{sid}", {"title": TITLE})
    assert status == 200, body
    return sid, run_id


def main_states(page: Page, name: str) -> None:
    """The plain page, the History panel, the ⋯ menu and the Files dialog of one session."""
    close_history(page)
    check(page, HEADER, name)
    open_history(page)
    check(page, ["#dag-panel .dag-head", "#dag .dag-branches", ".merge-controls"]
          + ([] if (page.viewport_size or {}).get("width", 0) < 760 else HEADER),
          name + "-history", header=(page.viewport_size or {}).get("width", 0) >= 760)
    close_history(page)
    page.click(".session-menu-btn")
    expect(page.locator("#rename-input")).to_be_visible()
    check(page, [".session-pop"], name + "-menu", header=False)
    page.keyboard.press("Escape")
    page.click("#open-files")
    expect(page.locator("#files-panel .files-head")).to_be_visible(timeout=TIMEOUT)
    check(page, ["#files-dialog .files-head", "#files-upload"], name + "-files", header=False)
    page.keyboard.press("Escape")
    expect(page.locator("#files-dialog")).to_be_hidden()


@pytest.mark.parametrize("size", SIZES)
def test_main_sibling_fork_archived(page: Page, login: Any, shared_server: Server,
                                    size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid, run_id = titled_session(shared_server)
    shared_server.run(sid, "say " + "a long answer " * 40)
    login(page, sid)
    expect(page.locator("#session-tokens")).to_be_attached(timeout=TIMEOUT)
    main_states(page, "main")

    # A sibling run (Regenerate): the page shows its branch.
    status, body = shared_server.api("POST", f"/api/runs/{run_id}/continue",
                                     {"regenerate": True, "session_id": sid})
    assert status == 200, body
    page.reload()
    expect(page.locator("#branch-badge")).not_to_have_attribute("data-branch", "main")
    main_states(page, "sibling")

    # A fork of it.
    status, body = shared_server.api("POST", f"/api/sessions/{sid}/fork")
    assert status == 201, body
    page.goto(f"{shared_server.base_url}/s/{body['session_id']}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#lineage")).to_be_attached()
    main_states(page, "fork")

    # Archived.
    status, body = shared_server.api("PATCH", f"/api/sessions/{sid}", {"archived": True})
    assert status == 200, body
    page.goto(f"{shared_server.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#restore-session")).to_be_visible()
    main_states(page, "archived")


@pytest.mark.parametrize("size", SIZES)
def test_merge_conflicts_and_toasts(page: Page, login: Any, shared_server: Server,
                                    size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid, turn_id = titled_session(shared_server, "say hi")
    shared_server.spawn_conflicting(sid, turn_id)
    login(page, sid)
    # An error toast, then the History panel: the toast leaves its branch list free.
    page.fill("#composer-text", "fail boom")
    page.press("#composer-text", "Enter")
    expect(page.locator("#toasts .toast")).to_contain_text("boom", timeout=TIMEOUT)
    check(page, HEADER + ["#toasts"], "toast")
    open_history(page)
    lanes = page.locator("#dag .dag-branch[data-branch^=sub_] input[type=checkbox]")
    expect(lanes).to_have_count(2, timeout=TIMEOUT)
    wide = (page.viewport_size or {}).get("width", 0) >= 760
    history = ["#dag-panel .dag-head", "#dag .dag-branches", ".merge-controls", "#toasts"]
    check(page, history + (HEADER if wide else []), "toast-history", header=wide)
    for i in range(2):
        lanes.nth(i).check()
    page.click("#merge-btn")
    expect(page.locator("#dag-conflicts .conflict")).to_have_count(1, timeout=TIMEOUT)
    # The panel scrolls to the conflicts (the branch list above may leave the view): their
    # head, the Merge bar and the toasts in view; then each part of the editor, scrolled to.
    check(page, ["#dag-conflicts .dag-detail-head", ".merge-controls", "#toasts"]
          + (HEADER if wide else []), "conflicts", header=wide)
    for part in ("#dag-conflicts .conflict-sides", "#dag-conflicts .conflict-result",
                 "#merge-resolved-btn"):
        page.locator(part).scroll_into_view_if_needed()
        check(page, [part, ".merge-controls", "#toasts"], "conflicts-editor", header=False)


@pytest.mark.parametrize("size", SIZES)
def test_an_error_toast_goes_after_a_later_success(page: Page, login: Any,
                                                   shared_server: Server,
                                                   size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = shared_server.new_session()
    login(page, sid)
    page.fill("#composer-text", "fail boom")
    page.press("#composer-text", "Enter")
    expect(page.locator("#toasts .toast-error")).to_contain_text("boom", timeout=TIMEOUT)
    run_id = send_from_page(page, "say all good")
    expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                              timeout=TIMEOUT)
    # At once (not the 8 s after which any toast goes).
    assert page.locator("#toasts .toast-error").count() == 0
