"""The model picker and token counts in real Chromium: the picker lists the endpoints' models
(plus demo), a choice is kept across reloads and a server restart, and each turn shows the
tokens it used, the session its total."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import send_from_page
from tests.model_replay import ReplayServer, text_stream

TIMEOUT = 15_000


def open_session(page: Page, srv: Any, sid: str) -> None:
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    page.goto(f"{srv.base_url}/s/{sid}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#model-select")).to_be_visible(timeout=TIMEOUT)


def test_pick_a_model_keep_it_and_see_tokens(page: Page, server_factory: Any,
                                             tmp_path: Path, replay: ReplayServer,
                                             console_errors: Any) -> None:
    console_errors.allow_server_down()  # the open page's socket while the server restarts
    replay.models = ["smollm2", "tiny-coder"]
    endpoints = tmp_path / "endpoints.toml"
    endpoints.write_text(f'[[endpoints]]\nname = "local"\nbase_url = "{replay.base_url}"\n')
    srv = server_factory(BRAID_ENDPOINTS=str(endpoints))
    sid = srv.new_session()
    open_session(page, srv, sid)
    options = page.locator("#model-select option")
    expect(options).to_have_text(["demo", "smollm2 · local", "tiny-coder · local"])
    expect(page.locator("#model-select")).to_have_value("demo")

    page.select_option("#model-select", "smollm2@local")
    expect(page.locator("#model-picker")).to_have_attribute("data-model", "smollm2@local",
                                                            timeout=TIMEOUT)
    page.reload()
    expect(page.locator("#model-select")).to_have_value("smollm2@local", timeout=TIMEOUT)

    replay.push(text_stream("Hi from smollm2.", usage=True))
    run_id = send_from_page(page, "hello", until_done=True)
    turn = page.locator(f"#turn-{run_id}")
    expect(turn.locator(".md").last).to_have_text("Hi from smollm2.")
    expect(turn.locator(".turn-usage")).to_contain_text("smollm2")
    expect(turn.locator(".turn-usage")).to_contain_text("18 tokens")
    expect(page.locator("#session-tokens")).to_have_text("18 tokens", timeout=TIMEOUT)

    srv.stop()
    again = server_factory(data_dir=srv.data_dir, BRAID_ENDPOINTS=str(endpoints))
    open_session(page, again, sid)
    expect(page.locator("#model-select")).to_have_value("smollm2@local")
    expect(page.locator(f"#turn-{run_id} .turn-usage")).to_contain_text("18 tokens")
    # A demo turn adds its tokens to the session's total.
    page.select_option("#model-select", "demo")
    expect(page.locator("#model-picker")).to_have_attribute("data-model", "demo",
                                                            timeout=TIMEOUT)
    second = send_from_page(page, "say from the demo", until_done=True)
    usage = page.locator(f"#turn-{second} .turn-usage")
    expect(usage).to_contain_text("demo")
    text = usage.inner_text()
    demo_tokens = int(text.split()[-2].lstrip("≈"))
    expect(page.locator("#session-tokens")).to_have_text(f"{18 + demo_tokens} tokens",
                                                         timeout=TIMEOUT)
