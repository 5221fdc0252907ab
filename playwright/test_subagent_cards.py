"""Sub-agents the model spawns, live on the page (issue 25), in real Chromium against a real
server and the demo model: one message with three `spawn` lines and `merge theirs` shows a
card per child in the parent's bubble, each streaming a preview of its answer, in every tab;
three lanes in the History graph, labelled by the children's labels; Stop on one child ends
it cancelled (its card says so) while the others finish; the merge node lands; Transcript
opens a child's chat; a reload draws the cards again from the records, with their tokens. At a
phone's size (390×844) and a laptop's, every control of a card in the window and uncovered.
Set BRAID_SHOTS=DIR to keep a screenshot of the cards mid-spawn and at the end."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from conftest import send_from_page

Server = Any  # the root conftest's `Server`
TIMEOUT = 30_000
SIZES = [pytest.param({"width": 1400, "height": 900}, id="laptop"),
         pytest.param({"width": 390, "height": 844}, id="phone")]

# Each child's prompt is its own demo script (`\n` in a spawn line is a newline in it).
ALPHA = "slow 120\\nwrite alpha.txt A\\nsay " + " ".join(f"alpha{i}" for i in range(30))
BETA = "slow 300\\nsay " + " ".join(f"beta{i}" for i in range(120))
GAMMA = "slow 120\\nwrite gamma.txt C\\nsay " + " ".join(f"gamma{i}" for i in range(30))
MESSAGE = f"spawn alpha: {ALPHA}\nspawn beta: {BETA}\nspawn gamma: {GAMMA}\nmerge theirs"

# Each visible control inside `root`: in the window, and the element at its own centre.
UNCOVERED = """(root) => {
  const problems = [];
  for (const el of root.querySelectorAll("button, a[href], summary")) {
    if (!el.checkVisibility()) continue;
    el.scrollIntoView({block: "nearest"});
    const r = el.getBoundingClientRect();
    const W = innerWidth + 0.5, H = innerHeight + 0.5;
    if (r.left < -0.5 || r.top < -0.5 || r.right > W || r.bottom > H) {
      problems.push("outside: " + el.textContent.trim());
      continue;
    }
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    const mine = hit && (hit === el || el.contains(hit));
    if (!mine) problems.push("covered: " + el.textContent.trim());
  }
  return problems;
}"""


def shot(page: Page, name: str, bubble: Any) -> None:
    shots = os.environ.get("BRAID_SHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        bubble.locator(".child-cards").first.scroll_into_view_if_needed()
        page.screenshot(path=f"{shots}/{name}-{(page.viewport_size or {}).get('width')}.png")


def card(page: Page, label: str) -> Any:
    return page.locator(".sub-card", has=page.locator(".sub-label", has_text=label))


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_three_children_live_cards_lanes_stop_one_and_the_merge(
        page: Page, context: BrowserContext, login: Any, shared_server: Server,
        size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    session_id = shared_server.new_session()
    login(page, session_id)
    other = context.new_page()  # a second tab: the same cards, from the same events
    login(other, session_id)

    parent = send_from_page(page, MESSAGE)
    bubble = page.locator(f"#turn-{parent}")
    cards = bubble.locator(".child-cards > .sub-card")
    expect(cards).to_have_count(3, timeout=TIMEOUT)
    # In the order they started (they start in parallel).
    assert sorted(cards.locator(".sub-label").all_inner_texts()) == ["alpha", "beta", "gamma"]
    # Live: each streams a preview of its answer (the text the deltas bring, no element each).
    for label in ("alpha", "beta", "gamma"):
        expect(card(page, label).locator(".sub-preview")).to_contain_text(
            f"{label}0", timeout=TIMEOUT)
    expect(card(page, "beta")).to_have_attribute("data-status", "RUNNING")
    assert page.locator(".sub-preview .live-block").count() <= 3  # one block, not a span each
    # The other tab shows them too.
    expect(other.locator(f"#turn-{parent} .sub-card")).to_have_count(3, timeout=TIMEOUT)
    expect(card(other, "beta").locator(".sub-preview")).to_contain_text("beta0", timeout=TIMEOUT)

    # Three lanes in the graph, named by the children's labels (never a sub_<hex> id).
    if size["width"] < 760:
        page.click("[data-toggle-dag]")  # the History panel is an overlay on a phone
    lanes = page.locator("#dag .dag-branch[data-branch^=sub_]")
    expect(lanes).to_have_count(3, timeout=TIMEOUT)
    expect(lanes.locator(".branch-name")).to_have_text(
        [re.compile(r"sub-agent (alpha|beta|gamma)")] * 3)
    assert not re.search(r"sub_[0-9a-f]{10}_", page.locator("#dag").inner_text())
    text = bubble.inner_text()
    m = re.search(r"sub_[0-9a-f]{10}_", text)
    assert not m, text[max(0, m.start() - 300):m.end() + 100]
    if size["width"] < 760:
        page.click("[data-toggle-dag]")

    # Two finish while the third still runs: their cards say done, with files and tokens.
    for label, path in (("alpha", "alpha.txt"), ("gamma", "gamma.txt")):
        done = card(page, label)
        expect(done).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
        expect(done.locator(".sub-card-result")).to_contain_text(f"{label}29")
        expect(done.locator(f".chip[data-path='{path}']")).to_have_count(1)
        expect(done.locator(".sub-tokens")).to_contain_text("tokens")
    expect(card(page, "beta")).to_have_attribute("data-status", "RUNNING")
    # Their lanes grew to their last turn; beta's has not got there yet.
    for label, turns in (("alpha", 1), ("gamma", 1), ("beta", 0)):
        branch = card(page, label).get_attribute("data-branch")
        expect(page.locator(f"#dag .dag-node[data-branch='{branch}'][data-kind=turn]")
               ).to_have_count(turns, timeout=TIMEOUT)
    # A reload now draws all three from what is at hand (the parent's journal, the live
    # child with its text so far), and beta keeps streaming into its card.
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    expect(page.locator(f"#turn-{parent} .child-cards > .sub-card")).to_have_count(3)
    for label in ("alpha", "gamma"):
        expect(card(page, label)).to_have_attribute("data-status", "COMPLETED")
        expect(card(page, label).locator(".sub-tokens")).to_contain_text("tokens")
    beta = card(page, "beta")
    expect(beta).to_have_attribute("data-status", "RUNNING")
    shown = len(beta.locator(".sub-preview").inner_text())
    expect(beta.locator(".sub-preview")).not_to_have_text(
        beta.locator(".sub-preview").inner_text(), timeout=TIMEOUT)  # still growing
    assert len(beta.locator(".sub-preview").inner_text()) > shown

    shot(page, "subagents-running", page.locator(f"#turn-{parent}"))
    # The card's controls are in the window and uncovered, at this size too.
    assert page.evaluate(UNCOVERED, beta.element_handle()) == []
    # Stop on one child: it ends cancelled, and says so, in both tabs.
    beta.get_by_role("button", name="Stop sub-agent beta").click()
    expect(beta).to_have_attribute("data-status", "CANCELLED", timeout=TIMEOUT)
    expect(beta.locator(".sub-status")).to_have_text("cancelled")
    expect(beta.get_by_role("button", name=re.compile("Stop"))).to_have_count(0)
    expect(other.locator(f"#turn-{parent} .sub-card[data-status=CANCELLED]")).to_have_count(
        1, timeout=TIMEOUT)
    bubble = page.locator(f"#turn-{parent}")

    # The parent goes on and merges: the merge node lands in the graph.
    expect(bubble).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    merge = page.locator("#dag .dag-node[data-kind=merge]")
    expect(merge).to_have_count(1, timeout=TIMEOUT)
    assert int(merge.get_attribute("data-parents") or 0) >= 3
    expect(bubble.locator(".child-total")).to_contain_text("3 sub-agents")
    # The cards stayed through the parent's own redraw, with their tokens.
    expect(bubble.locator(".sub-card[data-status=COMPLETED] .sub-tokens")).to_have_count(2)

    # Transcript: the child's own chat, in the History panel.
    card(page, "alpha").get_by_role("button", name="Transcript").click()
    detail = page.locator("#dag-detail")
    expect(detail.locator(".dag-user")).to_contain_text("write alpha.txt A", timeout=TIMEOUT)
    expect(detail.locator(".dag-files")).to_contain_text("alpha.txt")
    expect(detail.locator(".dag-files")).not_to_contain_text("gamma.txt")
    detail.locator(".dag-close").click()

    # A reload draws the cards from the records alone, tokens and total included.
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    cards = page.locator(f"#turn-{parent} .child-cards > .sub-card")
    expect(cards).to_have_count(3)
    for label in ("alpha", "gamma"):
        expect(card(page, label)).to_have_attribute("data-status", "COMPLETED")
        expect(card(page, label).locator(".sub-tokens")).to_contain_text("tokens")
    expect(card(page, "beta")).to_have_attribute("data-status", "CANCELLED")
    expect(card(page, "beta").locator(".sub-status")).to_have_text("cancelled")
    total = page.locator(f"#turn-{parent} .child-total")
    expect(total).to_have_text(re.compile(r"^3 sub-agents · [1-9]\d* tokens$"))
    tokens = sum(int(t or 0) for t in cards.evaluate_all(
        "cs => cs.map(c => c.dataset.tokens)"))
    assert total.inner_text().endswith(f"· {tokens} tokens")
    assert page.evaluate(UNCOVERED, card(page, "gamma").element_handle()) == []
    shot(page, "subagents-done", page.locator(f"#turn-{parent}"))


def test_the_users_spawn_gets_a_live_card_in_the_turn_it_came_from(
        page: Page, login: Any, shared_server: Server) -> None:
    """The Spawn sub-agent button's child: its card in the turn's bubble, streaming, then
    done with its file; a reload draws it from the result's record."""
    session_id = shared_server.new_session()
    turn_id = shared_server.run(session_id, "say hi")["run_id"]
    login(page, session_id)
    page.click(f"#turn-{turn_id} .spawn-toggle")
    page.fill(f"#spawn-prompt-{turn_id}",
              "slow 150\nwrite kid.txt k\nsay " + " ".join(f"kid{i}" for i in range(20)))
    page.fill(f"#spawn-label-{turn_id}", "kid")
    page.click(f"#spawn-{turn_id} button[type=submit]")
    kid = page.locator(f"#turn-{turn_id} .sub-card")
    expect(kid).to_have_attribute("data-status", "RUNNING", timeout=TIMEOUT)
    expect(kid.locator(".sub-label")).to_have_text("kid")
    expect(kid.locator(".sub-preview")).to_contain_text("kid0", timeout=TIMEOUT)
    expect(kid).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(kid.locator(".chip[data-path='kid.txt']")).to_have_count(1)
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    kid = page.locator(f"#turn-{turn_id} .sub-card")
    expect(kid).to_have_attribute("data-status", "COMPLETED")
    expect(kid.locator(".sub-card-result")).to_contain_text("kid19")
    expect(kid.locator(".sub-tokens")).to_contain_text("tokens")
