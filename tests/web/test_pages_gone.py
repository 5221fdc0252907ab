"""A deleted session's address (or one that is not the user's) answers a page that says so,
with a way back, not the login form (issue 23)."""

from __future__ import annotations

import urllib.error
import urllib.request

from conftest import Server


def get(srv: Server, path: str) -> tuple[int, str]:
    req = urllib.request.Request(f"{srv.base_url}{path}",
                                 headers={"Authorization": f"Bearer {srv.token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_deleted_sessions_page_says_it_is_gone(shared_server: Server) -> None:
    sid = shared_server.new_session()
    assert get(shared_server, f"/s/{sid}")[0] == 200
    status, _ = shared_server.api("DELETE", f"/api/sessions/{sid}")
    assert status in (200, 204)
    status, body = get(shared_server, f"/s/{sid}")
    assert status == 404
    assert 'id="session-gone"' in body and "It was deleted" in body
    assert 'href="/"' in body and 'name="token"' not in body  # no login form
