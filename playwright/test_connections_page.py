"""Connections on the page, in real Chromium against a real server whose operator allowed
loopback hosts (BRAID_ENDPOINT_HOSTS, BRAID_MCP_HOSTS): the user adds a model endpoint
(the replay server, an OpenAI-compatible server on 127.0.0.1) with a key, picks its model
and runs a turn on it; adds the tests' HTTP MCP server and sees its tools in the Tools list;
the key is never shown back; a refused URL says why in the dialog; removing one takes its
models out of the picker. At a laptop's and a phone's size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import mcp_http_server, send_from_page
from tests.model_replay import ReplayServer, text_stream

TIMEOUT = 30_000
KEY = "sk-page-0123456789-secret"
SIZES = [pytest.param({"width": 1400, "height": 900}, id="laptop"),
         pytest.param({"width": 390, "height": 844}, id="phone")]


def open_connections(page: Page) -> None:
    page.click("#session-actions > summary")
    page.click("#open-connections")
    expect(page.locator("#connections-dialog")).to_be_visible()
    expect(page.locator("#add-endpoint")).to_be_visible(timeout=TIMEOUT)


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_a_user_adds_an_endpoint_and_an_mcp_server_picks_the_model_and_runs_a_turn(
        page: Page, server_factory: Any, tmp_path: Path, replay: ReplayServer,
        size: dict[str, int], console_errors: Any) -> None:
    console_errors.allow(r"status of 403 \(Forbidden\)$")  # the browser's line for the refusal
    replay.models = ["loop-model"]
    replay.default = text_stream("answered by the loopback model")
    srv = server_factory(BRAID_ENDPOINT_HOSTS="127.0.0.1", BRAID_MCP_HOSTS="127.0.0.1")
    sid = srv.new_session()
    page.set_viewport_size(size)
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#model-select")).to_be_visible(timeout=TIMEOUT)
    expect(page.locator("#model-select option")).to_have_text(["demo"])

    open_connections(page)
    form = page.locator("#add-endpoint")
    # A URL the rules refuse is said in the dialog, and nothing is kept.
    form.locator("[name=name]").fill("bad")
    form.locator("[name=url]").fill("http://example.com/v1")
    form.locator("button[type=submit]").click()
    expect(page.locator(".connections-error")).to_contain_text("https://", timeout=TIMEOUT)
    expect(page.locator(".connection-row")).to_have_count(0)

    form.locator("[name=name]").fill("loop")
    form.locator("[name=url]").fill(replay.base_url)
    form.locator("[name=key]").fill(KEY)
    form.locator("button[type=submit]").click()
    row = page.locator(".connection-row[data-name=loop]")
    expect(row).to_contain_text("key set", timeout=TIMEOUT)
    expect(row).to_contain_text("loop-model")
    assert KEY not in page.content()

    with mcp_http_server(tmp_path / "mcp") as url:
        mcp = page.locator("#add-mcp")
        mcp.locator("[name=name]").fill("web")
        mcp.locator("[name=url]").fill(url)
        mcp.locator("[name=headers]").fill("X-Api-Key: mcp-page-secret-42")
        mcp.locator("button[type=submit]").click()
        expect(page.locator(".connection-row[data-name=web]")).to_contain_text(
            "headers set", timeout=TIMEOUT)
        assert "mcp-page-secret-42" not in page.content()
        page.locator("#connections-dialog [data-close-dialog]").click()
        expect(page.locator("#connections-dialog")).to_be_hidden()

        # Its tools are in the session's Tools list, counted like the others.
        page.click("#session-actions > summary")
        page.click("#session-tools > summary")
        tool = page.locator("#tools-list [data-tool='mcp__web__whoami']")
        expect(tool).to_be_visible(timeout=TIMEOUT)
        expect(tool.locator(".tool-server")).to_have_text("web")
        expect(tool.locator(".tool-tokens")).to_contain_text("tokens")
        page.keyboard.press("Escape")

    # The endpoint's model is in the picker without a reload; a turn runs on it.
    select = page.locator("#model-select")
    expect(page.locator("#model-select option")).to_have_text(["demo", "loop-model · loop"],
                                                             timeout=TIMEOUT)
    select.select_option("loop-model@loop")
    expect(page.locator("#model-picker")).to_have_attribute("data-model", "loop-model@loop",
                                                            timeout=TIMEOUT)
    send_from_page(page, "hello there", until_done=True)
    expect(page.locator("section.turn").last).to_contain_text(
        "answered by the loopback model", timeout=TIMEOUT)
    chat = [r for r in replay.requests if r.get("model") == "loop-model"]
    assert chat and chat[-1]["_headers"]["authorization"] == f"Bearer {KEY}"

    # Removed, its model leaves the picker.
    open_connections(page)
    page.locator(".connection-row[data-name=loop] [data-remove-connection]").click()
    expect(page.locator(".connection-row[data-name=loop]")).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator("#model-select option", has_text="loop-model")).to_have_count(
        0, timeout=TIMEOUT)
