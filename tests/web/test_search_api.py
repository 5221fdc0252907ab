"""`GET /api/search?q=&limit=` (DESIGN §5) through a real server: the caller's messages by
words, `{results: [{session_id, title, run_id, message_index, role, snippet}]}`; another
user's never; hostile queries and bad limits a clear answer, never a 500. And the sidebar's
search box (`/sessions/list?q=`): titles, then messages, each snippet escaped."""

from __future__ import annotations

import urllib.parse

import pytest

from conftest import Server
from tests.faults.test_upload_boundaries import multipart

HOSTILE = ['"', "'", "*", "NEAR(", "NEAR(a b", "-", "--x", '"unbalanced', "a AND", "OR",
           "(", ")", "^", ":", "col:word", "\\", "%", "_", "\u0000", "🦓🦓", "zébra",
           "斑马", "<script>", "x" * 1000, "   "]


def search(srv: Server, q: str, token: str | None = None, **more: str) -> tuple[int, object]:
    query = urllib.parse.urlencode({"q": q, **more})
    return srv.api("GET", f"/api/search?{query}", token=token)


def test_finds_the_caller_s_messages(shared_server: Server, other_token: str) -> None:
    sid = shared_server.new_session()
    run = shared_server.run(sid, "say the aardvark <b>digs</b> at night")
    status, body = search(shared_server, "aardvark night")
    assert status == 200
    assert body == {"results": [
        {"session_id": sid, "title": "say the aardvark <b>digs</b> at night",
         "run_id": run["run_id"], "message_index": 1, "role": "assistant",
         "snippet": "the «aardvark» <b>digs</b> at «night»"},
        {"session_id": sid, "title": "say the aardvark <b>digs</b> at night",
         "run_id": run["run_id"], "message_index": 0, "role": "user",
         "snippet": "say the «aardvark» <b>digs</b> at «night»"}]}
    # Another user finds none of it.
    assert search(shared_server, "aardvark", token=other_token) == (200, {"results": []})
    # The limit: default 20, at most 100; not a positive number is a bad request.
    for _ in range(2):
        shared_server.run(sid, "say aardvark again")
    assert len(search(shared_server, "aardvark", limit="3")[1]["results"]) == 3  # type: ignore[index]
    assert search(shared_server, "aardvark", limit="1000")[0] == 200
    for bad in ("0", "-1", "x", "1.5"):
        status, body = search(shared_server, "aardvark", limit=bad)
        assert status == 400 and body["error"]["code"] == "bad_request", bad  # type: ignore[index]


def test_hostile_queries_never_fail(shared_server: Server) -> None:
    for q in HOSTILE:
        status, body = search(shared_server, q)
        assert status == 200 and isinstance(body["results"], list), (q, body)  # type: ignore[index]
    assert search(shared_server, "") == (200, {"results": []})  # no word: nothing found
    assert shared_server.api("GET", "/api/search") == (200, {"results": []})
    status, body = search(shared_server, "x" * 1001)
    assert status == 400 and body["error"]["code"] == "bad_request"  # type: ignore[index]


def test_sidebar_search_lists_titles_then_messages_escaped(shared_server: Server) -> None:
    sid = shared_server.new_session()
    run = shared_server.run(sid, "say a <img src=x onerror=alert(1)> pangolin")
    status, html = shared_server.page("/sessions/list?q=pangolin")
    assert status == 200
    assert 'id="session-list"' in html and f'href="/s/{sid}"' in html  # the title matches
    assert f'href="/s/{sid}#turn-{run["run_id"]}"' in html  # a message, linked to its turn
    assert "<img" not in html and "&lt;img src=x" in html
    assert "<mark>pangolin</mark>" in html


@pytest.mark.slow
def test_older_turns_load_down_to_a_found_run(shared_server: Server) -> None:
    """`/s/{id}/turns?before=&run=`: the page's jump to a found turn older than it shows."""
    sid = shared_server.new_session()
    runs = [shared_server.run(sid, f"say step {i}")["run_id"] for i in range(62)]
    status, page = shared_server.page(f"/s/{sid}")
    assert status == 200 and f'id="turn-{runs[0]}"' not in page
    start = page.split("/turns?before=", 1)[1].split("&", 1)[0]
    status, html = shared_server.page(f"/s/{sid}/turns?before={start}&run={runs[1]}")
    assert status == 200
    assert f'id="turn-{runs[1]}"' in html and f'id="turn-{runs[0]}"' not in html
    assert 'id="older-turns"' in html  # the turns before it still load on scroll
    # Without it, or with an unknown run: the usual page of 30 older turns.
    for extra in ("", "&run=nope"):
        status, html = shared_server.page(f"/s/{sid}/turns?before={start}{extra}")
        assert status == 200 and html.count('<section class="turn"') == 30
        assert f'id="turn-{runs[1]}"' not in html


def test_an_upload_is_found_by_its_file_names(shared_server: Server) -> None:
    import http.client
    import json

    sid = shared_server.new_session()
    conn = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=60)
    body, ctype = multipart([("quarterly-figures.csv", b"a,b\n")])
    conn.request("POST", f"/api/sessions/{sid}/files", body=body,
                 headers={"Authorization": f"Bearer {shared_server.token}",
                          "Content-Type": ctype})
    res = conn.getresponse()
    made = json.loads(res.read())
    assert res.status == 201, made
    status, body = search(shared_server, "quarterly figures")
    assert status == 200
    assert [(h["run_id"], h["role"]) for h in body["results"]] == [(made["run_id"], "user")]  # type: ignore[index]


def test_no_token_no_search(shared_server: Server) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{shared_server.base_url}/api/search?q=a", timeout=10)
    assert e.value.code == 401
    assert search(shared_server, "a", token="not-a-token")[0] == 401
