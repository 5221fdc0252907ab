"""Browser tests drive Debian's Chromium through Playwright (it cannot download its own)."""

from __future__ import annotations

import os
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": os.environ.get("CHROMIUM", "/usr/bin/chromium"),
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture
def login(shared_server: Any) -> Any:
    """Log a page in through the login URL, as a user would from `braid serve`'s output."""

    def do(page: Any, session_id: str | None = None) -> Any:
        page.goto(f"{shared_server.base_url}/login?token={shared_server.token}")
        if session_id:
            page.goto(f"{shared_server.base_url}/s/{session_id}")
        page.wait_for_selector("#conn[data-state=open]", timeout=10_000)
        return page

    return do
