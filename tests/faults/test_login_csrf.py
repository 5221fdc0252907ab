"""Issue 21 row 14, login CSRF: a page on another site that sent the browser to
`GET /login?token=<the attacker's>` set the cookie, so the victim's later typing landed in the
attacker's sessions. Now a login link sets the cookie only when opened by the user (the
address bar: `Sec-Fetch-Site: none`, or a client without such headers); from another site
(`cross-site`, `same-site`: another port of the same host, a foreign Origin or Referer) the
login page says why and sets nothing. Headers as browsers send them, through HTTP."""

from __future__ import annotations

import http.client

import pytest

from conftest import TOKEN, Server


def login(server: Server, **headers: str) -> tuple[int, str | None, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", f"/login?token={TOKEN}", headers={k.replace("_", "-"): v
                                                           for k, v in headers.items()})
    res = conn.getresponse()
    out = res.status, res.getheader("set-cookie"), res.read().decode()
    conn.close()
    return out


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
    {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"},
    {"Referer": "http://evil.example/page"},
    {"Referer": "http://127.0.0.1:1/attack"},  # another port of this host
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "none", "Referer": "http://evil.example/"},
])
def test_a_login_link_from_another_site_sets_no_cookie(shared_server: Server,
                                                       headers: dict[str, str]) -> None:
    status, cookie, body = login(shared_server, **headers)
    assert status == 403 and cookie is None, (status, cookie)
    assert "another site" in body and TOKEN not in body


@pytest.mark.parametrize("headers", [
    {},  # a script, an older browser
    {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-User": "?1"},
    {"Sec-Fetch-Site": "same-origin"},
])
def test_the_printed_login_url_opened_by_the_user_logs_in(shared_server: Server,
                                                          headers: dict[str, str]) -> None:
    headers = {**headers, "Referer": f"{shared_server.base_url}/login"} \
        if headers.get("Sec-Fetch-Site") == "same-origin" else headers
    status, cookie, _ = login(shared_server, **headers)
    assert status == 303 and cookie and cookie.startswith(f"braid_token={TOKEN}"), cookie
