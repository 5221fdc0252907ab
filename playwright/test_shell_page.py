"""The sandboxed shell on the page, in real Chromium against a real server: a command's
output streams into its open card as it comes, and a reload mid-command shows what came so
far and then the rest; a command that reaches for the web asks with a network card (the
host, Approve, Deny), and the ⋯ menu lists the allowed host with Take back. At 1400×900 and
390×844 (every control within the phone's width)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import Server, free_port, send_from_page

TIMEOUT = 30_000
HOST = "127.0.0.2"
SIZES = ({"width": 1400, "height": 900}, {"width": 390, "height": 844})


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"hello from the web\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def web() -> Iterator[int]:
    httpd = ThreadingHTTPServer((HOST, 0), Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()


@pytest.fixture(scope="module")
def shell_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path_factory.mktemp("shellpage") / "data", port=free_port(),
                 env={"BRAID_SHELL": "sandbox", "BRAID_SHELL_HOSTS": HOST})
    srv.start()
    yield srv
    srv.stop()


def open_session(page: Page, server: Server, sid: str) -> None:
    page.goto(f"{server.base_url}/login?token={server.token}")
    page.goto(f"{server.base_url}/s/{sid}")
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)


def within_width(page: Page, selector: str) -> None:
    control = page.locator(selector).first
    control.scroll_into_view_if_needed()
    box_ = control.bounding_box()
    assert box_ is not None and box_["x"] >= 0
    assert box_["x"] + box_["width"] <= page.viewport_size["width"]  # type: ignore[index]


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_output_streams_into_the_card_and_survives_a_reload(
        page: Page, shell_server: Server, size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = shell_server.new_session()
    open_session(page, shell_server, sid)
    run_id = send_from_page(page, "shell for i in 1 2 3 4 5 6; do echo step$i; sleep 1; "
                            "done\nsay done")
    out = page.locator(f"#turn-{run_id} .tool-card[open] .tool-output")
    expect(out).to_contain_text("step1", timeout=TIMEOUT)
    expect(page.locator(f"#turn-{run_id}")).not_to_have_attribute("data-status", "COMPLETED")
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    out = page.locator(f"#turn-{run_id} .tool-output")
    expect(out).to_contain_text("step1", timeout=TIMEOUT)  # what came before the reload
    expect(out).to_contain_text("step6", timeout=TIMEOUT)  # and what came after
    expect(page.locator(f"#turn-{run_id}")).to_have_attribute("data-status", "COMPLETED",
                                                              timeout=TIMEOUT)
    expect(out).to_contain_text("exit code: 0")
    within_width(page, f"#turn-{run_id} .tool-card")


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_the_network_question_and_taking_a_host_back(
        page: Page, shell_server: Server, web: int, size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    sid = shell_server.new_session()
    open_session(page, shell_server, sid)
    run_id = send_from_page(page, f"shell curl -s -S -m 30 http://{HOST}:{web}/\nsay done")
    card = page.locator(f"#turn-{run_id} .approval-card:not(.approval-done)")
    expect(card).to_be_visible(timeout=TIMEOUT)
    expect(card.locator(".tool-name")).to_have_text("network")
    expect(card.locator(".network-host")).to_have_text(HOST)
    expect(card.locator(".always-btn")).to_have_count(0)  # approving is for the session
    for sel in (".approve-btn", ".deny-btn", ".deny-reason"):
        within_width(page, f"#turn-{run_id} .approval-card:not(.approval-done) {sel}")
    card.locator(".approve-btn").click()
    turn = page.locator(f"#turn-{run_id}")
    expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=TIMEOUT)
    expect(turn.locator(".tool-output")).to_contain_text("hello from the web")
    meta = json.loads((Path(shell_server.session_path(sid)) / "session.json").read_text())
    assert meta["shell_network_hosts"] == [HOST]
    # The ⋯ menu lists it; Take back asks again next time.
    page.click("#session-actions > summary")
    hosts = page.locator(".network-hosts")
    expect(hosts).to_contain_text(HOST)
    within_width(page, ".network-hosts .take-back")
    hosts.locator(".take-back").click()
    expect(page.locator(".network-hosts")).to_have_count(0, timeout=TIMEOUT)
    _, info = shell_server.api("GET", f"/api/sessions/{sid}")
    assert info["shell_network_hosts"] == []
    expect(page.locator("#network-select")).to_have_value("ask")
