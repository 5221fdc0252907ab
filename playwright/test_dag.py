"""The DAG panel in real Chromium against a real server: Spawn sub-agent adds a lane that fills
in with the result, ticking two lanes and pressing Merge draws the merge node with its edges,
a click on a sub-agent node shows the child's own transcript, conflicts show per file, and
the panel collapses."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import git as git_cli
from conftest import send_from_page

Server = Any  # the root conftest's `Server`
TIMEOUT = 20_000


def spawn(page: Page, turn_id: str, prompt: str, label: str = "") -> None:
    page.click(f"#turn-{turn_id} .spawn-toggle")
    page.fill(f"#spawn-prompt-{turn_id}", prompt)
    if label:
        page.fill(f"#spawn-label-{turn_id}", label)
    page.click(f"#spawn-{turn_id} button[type=submit]")
    # The form is sent, closed and emptied.
    expect(page.locator(f"#spawn-{turn_id}")).not_to_have_attribute("open", "", timeout=TIMEOUT)


def sub_rows(page: Page) -> Any:
    return page.locator("#dag .dag-branch[data-branch^=sub_]")


def refused_merge(page: Page, login: Any, server: Server) -> tuple[str, Any]:
    """A session whose two sub-agents both wrote same.txt, open in the page, both ticked and
    Merge pressed: (its id, the conflicts box)."""
    session_id = server.new_session()
    turn_id = server.run(session_id, "say hi")["run_id"]
    server.spawn_conflicting(session_id, turn_id)
    login(page, session_id)
    expect(sub_rows(page)).to_have_count(2, timeout=TIMEOUT)
    for i in range(2):
        sub_rows(page).nth(i).locator("input[type=checkbox]").check()
    page.click("#merge-btn")
    return session_id, page.locator("#dag-conflicts")


def test_spawn_two_sub_agents_merge_them_and_inspect_a_child(
        page: Page, login: Any, shared_server: Server) -> None:
    session_id = shared_server.new_session()
    turn_id = shared_server.run(session_id, "write base.txt base")["run_id"]
    login(page, session_id)
    expect(page.locator("#dag .dag-node")).not_to_have_count(0, timeout=TIMEOUT)
    expect(sub_rows(page)).to_have_count(0)

    # A slow sub-agent: its lane appears at once and fills in with its result when done.
    spawn(page, turn_id, "slow 150\nwrite red.txt red\nsay red", "red")
    card = page.locator(".sub-card").first
    expect(card).to_have_attribute("data-status", "RUNNING", timeout=TIMEOUT)
    expect(sub_rows(page)).to_have_count(1, timeout=TIMEOUT)
    lane = sub_rows(page).first
    expect(lane.locator(".branch-result")).to_have_text("…")
    expect(card).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(lane.locator(".branch-result")).to_have_text("red", timeout=TIMEOUT)
    expect(page.locator("#dag .dag-node[data-branch^=sub_][data-kind=turn]")).to_contain_text(
        "red")
    # The child's work is a card in its parent's bubble, never a turn of the parent's
    # transcript; its result message is there.
    expect(page.locator(f"#turn-{turn_id} .sub-card")).to_have_count(1)
    expect(page.locator(f"#turn-{card.get_attribute('data-run-id')}")).to_have_count(0)
    expect(page.locator("#transcript .bubble-assistant").last).to_contain_text(
        "finished on branch")
    # With the child's files as chips (no Revert: they are the child's), whose diff opens.
    result_turn = page.locator("#transcript section.turn").last
    chip = result_turn.locator(".chip[data-path='red.txt']")
    expect(chip).to_have_attribute("data-status", "added")
    expect(result_turn.locator(".revert-controls, .revert-btn")).to_have_count(0)
    chip.click()
    expect(page.locator("#transcript")).to_contain_text("+red", timeout=TIMEOUT)

    spawn(page, turn_id, "write blue.txt blue\nsay blue", "blue")
    expect(page.locator(".sub-card[data-status=COMPLETED]")).to_have_count(2, timeout=TIMEOUT)
    expect(sub_rows(page)).to_have_count(2, timeout=TIMEOUT)
    expect(page.locator("#dag .dag-branch .branch-result")).to_have_text(["blue", "red"],
                                                                          timeout=TIMEOUT)

    # Tick both lanes, press Merge: the merge node is drawn with an edge to each parent.
    # (With nothing ticked there is nothing to merge: the button says so by being disabled.)
    expect(page.locator("#merge-btn")).to_be_disabled()
    for i in range(2):
        sub_rows(page).nth(i).locator("input[type=checkbox]").check()
    expect(page.locator("#merge-btn")).to_be_enabled()
    page.fill("#merge-message", "bring it together")
    page.click("#merge-btn")
    merge_node = page.locator("#dag .dag-node[data-kind=merge]")
    expect(merge_node).to_have_count(1, timeout=TIMEOUT)
    expect(merge_node).to_have_attribute("data-parents", "3")
    merge_id = merge_node.get_attribute("data-id")
    expect(page.locator(f'#dag path.dag-edge[data-child="{merge_id}"]')).to_have_count(3)
    expect(page.locator(f'#dag circle.dag-dot[data-id="{merge_id}"]')).to_have_count(1)
    expect(page.locator("#transcript")).to_contain_text("merged: blue; red", timeout=TIMEOUT)
    expect(page.locator("#dag input[name=branches]:checked")).to_have_count(0)
    expect(page.locator("#merge-btn")).to_be_disabled()

    # A click on a sub-agent node shows the child's own transcript and files.
    page.locator("#dag .dag-node[data-branch^=sub_][data-kind=turn]", has_text="red").click()
    detail = page.locator("#dag-detail")
    expect(detail.locator(".dag-user")).to_have_text("slow 150\nwrite red.txt red\nsay red",
                                                     timeout=TIMEOUT)
    expect(detail.locator(".dag-assistant")).to_have_text("red")
    expect(detail.locator(".dag-files")).to_contain_text("red.txt")
    expect(detail.locator(".dag-files")).not_to_contain_text("blue.txt")
    expect(detail.get_by_role("button", name="Continue from here")).to_be_visible()
    detail.locator(".dag-close").click()
    expect(detail).to_be_empty()

    # The transcript as the server draws it gives each result its child's chips too.
    page.reload()
    results = page.locator("#transcript section.turn", has_text="finished on branch")
    expect(results.locator(".chip[data-path='red.txt']")).to_have_count(1, timeout=TIMEOUT)
    expect(results.locator(".chip[data-path='blue.txt']")).to_have_count(1)


def test_a_conflict_shows_per_file_and_the_panel_collapses(
        page: Page, login: Any, shared_server: Server) -> None:
    session_id, conflicts = refused_merge(page, login, shared_server)
    expect(conflicts).to_contain_text("same.txt", timeout=TIMEOUT)
    expect(conflicts.locator("pre")).to_have_count(2)
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(0)
    # Pick "take theirs" and merge again: the conflict box goes, the merge is drawn.
    for i in range(2):
        sub_rows(page).nth(i).locator("input[type=checkbox]").check()
    page.select_option("#merge-strategy", "theirs")
    page.click("#merge-btn")
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(1, timeout=TIMEOUT)
    expect(conflicts).to_be_empty()
    # Merge with a strategy sends no editor's text (an untouched editor holds markers).
    same = shared_server.session_path(session_id) / "workdir" / "same.txt"
    assert same.read_text() in ("red\n", "blue\n")  # the incoming side, whichever came last

    panel = page.locator("#dag-panel")
    page.click("[data-toggle-dag]")
    expect(panel).to_have_class("dag-panel collapsed")
    expect(page.locator("#dag-body")).to_be_hidden()
    page.reload()
    expect(page.locator("#dag-body")).to_be_hidden()  # remembered
    page.click("[data-toggle-dag]")
    expect(page.locator("#dag-body")).to_be_visible()
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(1, timeout=TIMEOUT)


def test_a_conflict_is_resolved_by_hand_in_the_merge_panel(
        page: Page, login: Any, shared_server: Server) -> None:
    session_id, conflicts = refused_merge(page, login, shared_server)
    editor = conflicts.locator("textarea.conflict-result")
    expect(editor).to_have_count(1, timeout=TIMEOUT)
    # Both sides, named in words: the branch merged into and the incoming one.
    expect(conflicts).to_contain_text(re.compile(
        r"main \+ sub-agent (red|blue) \(this branch, merged so far\)", re.I))
    expect(conflicts.locator(".tool-label").nth(1)).to_have_text(
        re.compile(r"^sub-agent (red|blue) \(incoming\)$"))
    expect(editor).to_have_value(re.compile(  # markers in words, no branch id
        r"^<<<<<<< main \+ sub-agent (red|blue)\n(red|blue)\n=======\n(red|blue)\n"
        r">>>>>>> sub-agent (red|blue)\n?$"))
    editor.fill("red and blue\n")
    page.click("#merge-resolved-btn")
    expect(page.locator("#dag .dag-node[data-kind=merge]")).to_have_count(1, timeout=TIMEOUT)
    expect(conflicts).to_be_empty()
    path = shared_server.session_path(session_id)
    assert (path / "workdir" / "same.txt").read_text() == "red and blue\n"
    parents = git_cli(path, "rev-list", "--parents", "-n", "1", "HEAD^").split()
    assert len(parents) == 4  # the merge commit (the turn's commit is on top) has 3 parents



@pytest.mark.parametrize("size", [pytest.param({"width": 1400, "height": 900}, id="laptop"),
                                  pytest.param({"width": 390, "height": 844}, id="phone")])
def test_a_finished_sub_agent_s_branch_is_listed_and_removed(
        page: Page, login: Any, shared_server: Server, size: dict[str, int]) -> None:
    """Sub-agent branches under the graph, each with Remove (issue 34): refused with a clear
    message while a run goes on; then Remove takes the branch, its lane and its nodes from
    the graph; the result stays in the chat; git still lists main and the other child."""
    page.set_viewport_size(size)
    server = shared_server
    session_id = server.new_session()
    turn_id = server.run(session_id, "say hi")["run_id"]
    server.spawn_conflicting(session_id, turn_id)  # red and blue, finished
    login(page, session_id)
    branches = [b for b in git_cli(server.session_path(session_id), "branch",
                                   "--format=%(refname:short)").split() if b.startswith("sub_")]
    red = next(b for b in branches if "_red_" in b)
    blue = next(b for b in branches if "_blue_" in b)
    slow = send_from_page(page, "slow 400\nsay " + " ".join(["busy"] * 40))
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    listed = page.locator("#sub-branches .sub-branch")
    expect(listed).to_have_count(2, timeout=TIMEOUT)
    expect(page.locator("#sub-branches h3")).to_contain_text("Sub-agent branches")
    assert sorted(listed.evaluate_all("els => els.map(e => e.dataset.branch)")) == \
        sorted(branches)
    row = page.locator(f'#sub-branches .sub-branch[data-branch="{red}"]')
    lane_nodes = page.locator(f'#dag .dag-node[data-branch="{red}"]')
    expect(lane_nodes).not_to_have_count(0)
    remove = row.get_by_role("button", name=re.compile("^Remove"))
    remove.scroll_into_view_if_needed()
    box, window = remove.bounding_box(), page.viewport_size
    assert box is not None and window is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= window["width"], (box, window)

    # While a turn runs: refused, said so, nothing removed.
    remove.click()
    expect(page.locator("#toasts")).to_contain_text("a run is going on", timeout=TIMEOUT)
    expect(row).to_have_count(1)
    expect(page.locator(f"#turn-{slow}")).to_have_attribute("data-status", "COMPLETED",
                                                             timeout=TIMEOUT)
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    remove.click()
    expect(row).to_have_count(0, timeout=TIMEOUT)
    expect(lane_nodes).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator(f'#dag .dag-branch[data-branch="{red}"]')).to_have_count(0)
    expect(page.locator("#toasts")).to_contain_text("Removed", timeout=TIMEOUT)
    expect(listed).to_have_count(1)
    # The child's result stays in the parent's chat.
    expect(page.locator("#transcript")).to_contain_text("sub-agent red")
    names = git_cli(server.session_path(session_id), "branch",
                    "--format=%(refname:short)").split()
    assert red not in names and blue in names and "main" in names
    git_cli(server.session_path(session_id), "fsck", "--strict")
    # Drawn the same by the server on a reload.
    page.reload()
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    expect(listed).to_have_count(1, timeout=TIMEOUT)
    expect(listed.first).to_have_attribute("data-branch", blue)
