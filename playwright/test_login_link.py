"""Issue 21 row 14 in real Chromium: a page on another origin (another port of this host)
that links to, or redirects the browser to, `/login?token=` sets no cookie; the printed
login URL opened with `page.goto` (as from the address bar) still logs in."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import Server


@pytest.fixture
def attacker(shared_server: Server) -> Iterator[str]:
    """Another origin serving a link and an auto-submitting redirect to the login link."""
    target = f"{shared_server.base_url}/login?token={shared_server.token}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/favicon.ico":
                self.send_response(204)
                self.end_headers()
                return
            script = "<script>location.href = document.getElementById('go').href</script>" \
                if self.path == "/auto" else ""
            body = f'<a id="go" href="{target}">win a prize</a>{script}'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def cookies(page: Page) -> list[str]:
    return [c["name"] for c in page.context.cookies()]


def test_a_cross_site_login_link_sets_no_cookie(page: Page, shared_server: Server,
                                                attacker: str, console_errors: Any) -> None:
    # The refused login answers 403 (Chromium logs it); any other console error fails.
    console_errors.allow(r"/login\?token=.*status of 403 \(Forbidden\)")
    page.goto(f"{attacker}/click")
    page.click("#go")
    expect(page.locator(".form-error")).to_contain_text("another site")
    assert page.url.startswith(f"{shared_server.base_url}/login")
    assert "braid_token" not in cookies(page)

    page.goto(f"{attacker}/auto")  # no click at all: the page sends the browser on
    page.wait_for_url(f"{shared_server.base_url}/login*")
    expect(page.locator(".form-error")).to_contain_text("another site")
    assert "braid_token" not in cookies(page)

    # The printed URL, opened as from the address bar, logs in.
    page.goto(f"{shared_server.base_url}/login?token={shared_server.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    assert "braid_token" in cookies(page)
