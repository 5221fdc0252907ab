"""MCP tools on the page, in real Chromium against a real server with a real stdio MCP server
(tests/fixtures/mcp_server.py): a call's card names its server; the session menu lists the
session's tools and switches them off and on again (checked against session.json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import Server, free_port, git

TIMEOUT = 30_000
MCP_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "mcp_server.py"


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server: one with an MCP server configured (`login` uses it)."""
    root = tmp_path_factory.mktemp("mcp")
    config = root / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {
        "command": sys.executable, "args": [str(MCP_SERVER)], "sandbox": False}}}))
    srv = Server(data_dir=root / "data", port=free_port(), env={"BRAID_MCP": str(config)})
    srv.start()
    yield srv
    srv.stop()


def meta(server: Server, sid: str) -> dict[str, Any]:
    return dict(json.loads(git(server.session_path(sid), "show", "HEAD:session.json")))


def test_a_calls_card_and_the_sessions_tools_switched_off_and_on(
        page: Page, login: Any, shared_server: Server) -> None:
    sid = shared_server.new_session()
    run = shared_server.run(sid, 'call mcp__files__write {"path": "m.txt", "text": "hi"}')
    assert run["status"] == "COMPLETED"
    login(page, sid)

    card = page.locator(".tool-card").last
    expect(card.locator(".tool-server")).to_have_text("files")
    expect(card.locator(".tool-name")).to_have_text("write")
    card.locator("summary").click()
    expect(card.locator(".tool-args")).to_contain_text('"path": "m.txt"')
    expect(card.locator(".tool-body")).to_contain_text("wrote m.txt")

    page.click("#session-actions > summary")
    page.click("#session-tools > summary")
    row = page.locator("#tools-list [data-tool='mcp__files__write']")
    expect(row).to_be_visible(timeout=TIMEOUT)
    expect(row.locator(".tool-server")).to_have_text("files")
    expect(page.locator("#tools-list [data-tool='mcp__files__read']")).to_contain_text(
        "read-only")
    expect(page.locator("#tools-list [data-tool='read_file']")).to_be_visible()
    expect(page.locator("#tools-cost")).to_contain_text("tokens of the context budget")

    # A click, not check(): the change redraws the session menu (every tab's), box included.
    row.locator("input[type=checkbox]").click()
    expect(page.locator("#session-tools > summary")).to_contain_text("(1 off)",
                                                                     timeout=TIMEOUT)
    assert meta(shared_server, sid)["tools_off"] == ["mcp__files__write"]

    # After a reload the switch is still off; switched on again, the session forgets it.
    page.reload()
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    page.click("#session-actions > summary")
    page.click("#session-tools > summary")
    box = page.locator("#tools-list [data-tool='mcp__files__write'] input[type=checkbox]")
    expect(box).to_be_checked(timeout=TIMEOUT)
    box.click()
    expect(page.locator("#session-tools > summary")).to_have_text("Tools", timeout=TIMEOUT)
    assert "tools_off" not in meta(shared_server, sid)
