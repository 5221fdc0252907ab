"""The page of constant size (DESIGN §8): the transcript renders the newest 30 turns, older
ones come from `GET /s/{id}/turns?before=N&commit=C` as the user scrolls up; each turn shows
what its last model call used of the context budget."""

from __future__ import annotations

import re

import pytest

from conftest import Server


def bubbles(html: str) -> list[str]:
    return re.findall(r'<div class="bubble bubble-user"[^>]*>say (t\d+)</div>', html)


@pytest.mark.slow
def test_the_page_shows_the_newest_turns_and_loads_older_ones(shared_server: Server) -> None:
    srv = shared_server
    sid = srv.new_session()
    for i in range(34):
        srv.run(sid, f"say t{i}")
    status, html = srv.page(f"/s/{sid}")
    assert status == 200
    assert bubbles(html) == [f"t{i}" for i in range(4, 34)]
    marker = re.search(r'hx-get="(/s/[0-9a-f]+/turns\?before=(\d+)&amp;commit=([0-9a-f]{40}))"',
                       html)
    assert marker is not None and marker.group(2) == "8"
    assert 'hx-trigger="intersect once"' in html
    status, older = srv.page(marker.group(1).replace("&amp;", "&"))
    assert status == 200
    assert bubbles(older) == [f"t{i}" for i in range(4)]
    assert 'id="older-turns"' not in older  # nothing before the first turn
    # A turn added since the page was rendered does not shift what "before" means.
    srv.run(sid, "say t34")
    status, again = srv.page(marker.group(1).replace("&amp;", "&"))
    assert bubbles(again) == bubbles(older)
    # Each finished turn says what its model call used of the budget (tool definitions too).
    assert re.search(r"context \d\.\dk of 32k tokens</span>", html)


def test_bad_paging_parameters(shared_server: Server) -> None:
    srv = shared_server
    sid = srv.new_session()
    srv.run(sid, "say one")
    assert srv.page(f"/s/{sid}/turns?before=x")[0] == 400
    assert srv.page(f"/s/{sid}/turns?before=0&commit=HEAD")[0] == 400
    assert srv.page(f"/s/{sid}/turns?before=0&commit={'0' * 40}")[0] == 404
    assert srv.page(f"/s/{'f' * 32}/turns?before=0")[0] == 404
    status, html = srv.page(f"/s/{sid}/turns?before=0")
    assert status == 200 and bubbles(html) == []


def test_a_compaction_summary_is_fetched_when_opened(shared_server: Server) -> None:
    """The divider is drawn folded and empty; its summary (up to a quarter of the context
    window) comes from `GET /s/{id}/notes/{message id}` when it is opened (issue 30)."""
    srv = shared_server
    sid = srv.new_session()
    for i in range(3):
        srv.run(sid, f"say t{i}")
    status, made = srv.api("POST", f"/api/sessions/{sid}/compact", {})
    assert status == 200, made
    last = srv.run(sid, "say after")
    status, html = srv.page(f"/s/{sid}")
    assert status == 200 and "2 earlier turns summarized" in html
    found = re.search(r'<div class="compaction-summary md" data-note-id="([0-9a-f]{32})" '
                      r'aria-busy="true"></div>', html)
    assert found is not None and "summary: say t0" not in html
    status, text = srv.page(f"/s/{sid}/notes/{found.group(1)}")
    assert status == 200 and text.startswith("<p>summary: say t0 | say t1")
    # Only a note of this session's branch: not a user's message, not another session's.
    user_message = last["messages"][0]["id"]
    assert srv.page(f"/s/{sid}/notes/{user_message}")[0] == 404
    assert srv.page(f"/s/{sid}/notes/{'f' * 32}")[0] == 404
    assert srv.page(f"/s/{sid}/notes/nope")[0] == 404
    other = srv.new_session()
    assert srv.page(f"/s/{other}/notes/{found.group(1)}")[0] == 404
    assert srv.page(f"/s/{'f' * 32}/notes/{found.group(1)}")[0] == 404
