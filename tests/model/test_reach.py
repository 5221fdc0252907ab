"""A user's own connection (model endpoint, HTTP MCP server) reaches only what the URL rules
allow, checked when each connection is made, not only when the URL was added: a name that
resolves into the server's own network later (DNS rebinding) reaches nothing. Against a
real HTTP server on loopback, through the real `httpx2` client Braid uses."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import httpx2
import pytest

from server.base.errors import Forbidden
from server.model import reach


@pytest.fixture
def loopback_port() -> Iterator[int]:
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = f"hello from {self.server.server_address[0]}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


def get(url: str, hosts: tuple[str, ...]) -> httpx2.Response:
    async def go() -> httpx2.Response:
        transport = reach.pinned_transport(hosts, "a model endpoint", "BRAID_ENDPOINT_HOSTS")
        async with httpx2.AsyncClient(transport=transport) as client:
            return await client.get(url)

    return asyncio.run(go())


def test_each_connection_is_checked_where_it_goes(loopback_port: int) -> None:
    url = f"http://localhost:{loopback_port}/"
    # As after a name was checked once and then re-pointed at the server's own network:
    # nothing checked it here but the connection itself, and it refuses.
    with pytest.raises(httpx2.ConnectError, match="own network.*BRAID_ENDPOINT_HOSTS"):
        get(url, ())
    # The operator allows loopback: it connects, to the address it checked.
    answer = get(url, ("127.0.0.0/8",))
    assert answer.status_code == 200 and answer.text == "hello from 127.0.0.1"


def test_the_rules_when_a_url_is_added_are_the_same(loopback_port: int) -> None:
    url = f"http://localhost:{loopback_port}/"
    with pytest.raises(Forbidden):
        reach.check_url((), url, "a model endpoint", "BRAID_ENDPOINT_HOSTS")
    # Plain http only for a host the list names.
    assert reach.check_url(("localhost",), url, "a model endpoint",
                           "BRAID_ENDPOINT_HOSTS") == url
