"""A deleted session's address (or one that is not the user's) answers a page that says so,
with a way back, not the login form (issue 23)."""

from __future__ import annotations

from conftest import Server


def test_a_deleted_sessions_page_says_it_is_gone(shared_server: Server) -> None:
    sid = shared_server.new_session()
    assert shared_server.page(f"/s/{sid}")[0] == 200
    status, _ = shared_server.api("DELETE", f"/api/sessions/{sid}")
    assert status in (200, 204)
    status, body = shared_server.page(f"/s/{sid}")
    assert status == 404
    assert 'id="session-gone"' in body and "It was deleted" in body
    assert 'href="/"' in body and 'name="token"' not in body  # no login form
