"""The connections' HTTP API (`/api/connections`, declared once in web/actions.py) and the
dialog's partial (`/connections`) on a real server: login required, a cookie's write only
from the page's own origin, statuses and error codes for bad input, and no key or header in
any answer or in the partial."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from conftest import Server
from tests.model_replay import ReplayServer

KEY = "sk-api-0123456789-secret"


def cookie_post(srv: Server, body: dict[str, Any], origin: str) -> int:
    req = urllib.request.Request(f"{srv.base_url}/api/connections", method="POST",
                                 data=json.dumps(body).encode(), headers={
                                     "Cookie": f"braid_token={srv.token}", "Origin": origin,
                                     "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return int(res.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_the_connections_api_answers_with_codes_and_never_a_key(
        server_factory: Any, replay: ReplayServer) -> None:
    srv = server_factory(BRAID_ENDPOINT_HOSTS="127.0.0.1")
    body = {"kind": "model", "name": "loop", "url": replay.base_url, "key": KEY}
    assert srv.api("GET", "/api/connections", token="wrong-token")[0] == 401
    assert srv.api("POST", "/api/connections", body, token="wrong-token")[0] == 401
    # The page's cookie writes only from the page's own origin (cross-site forgery).
    assert cookie_post(srv, body, "http://evil.example") == 403
    assert srv.api("GET", "/api/connections") == (200, {"connections": []})

    status, made = srv.api("POST", "/api/connections", body)
    assert status == 201 and made["secret_set"] and made["models"] == ["smollm2"], made
    status, listed = srv.api("GET", "/api/connections")
    assert status == 200 and listed == {"connections": [made]}
    status, html = srv.page("/connections")
    assert status == 200 and "key set" in html and "loop" in html
    for text in (json.dumps(made), json.dumps(listed), html):
        assert KEY not in text

    for bad, code in [({**body, "kind": "nope"}, "bad_request"),
                      ({**body, "url": 5}, "bad_request"),
                      ({**body, "name": ""}, "bad_request"),
                      ({**body, "url": "http://example.com/v1"}, "forbidden")]:
        status, refused = srv.api("POST", "/api/connections", bad)
        assert refused["error"]["code"] == code, (bad, refused)
        assert status == {"bad_request": 400, "forbidden": 403}[code]
    status, gone = srv.api("DELETE", "/api/connections/mcp/loop")
    assert status == 404 and gone["error"]["code"] == "not_found"
    status, gone = srv.api("DELETE", "/api/connections/model/loop")
    assert status == 200 and gone == {"connections": []}
    assert srv.log_path is not None and KEY not in srv.log_path.read_text()
