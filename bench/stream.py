"""The page at real answer lengths (issue 23): the browser's cost of a streamed answer, side by
side with the server alone, in one run.

For each answer length (BENCH_WORDS, default 300 and 3,000 words) the same demo answer
(`say w1 w2 … fin`, streamed word by word by the embedded demo model) is asked for:

  - server alone: `send_message` over a JSON WebSocket, until `run_completed` arrives;
  - in Chromium: Enter in the page's composer, until the answer's last word is shown in the
    turn (the live text while it streams, the rendered Markdown once it is done).

Each sample uses a fresh session. Then opening a session (`GET /s/{id}` until the socket is
connected) that holds one answer of the longest length, next to one that holds a short one.

Medians of BENCH_SAMPLES runs (default 3) are printed as a table.

Run: .venv/bin/python bench/stream.py     (BENCH_WORDS=300,3000,10000 for more)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from conftest import CHROMIUM_ARGS, Server, free_port  # noqa: E402

WORDS = [int(n) for n in os.environ.get("BENCH_WORDS", "300,3000").split(",")]
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "3"))
TIMEOUT = 600_000


def prompt(words: int) -> str:
    return "say " + " ".join(f"w{i}" for i in range(1, words)) + " fin"


def server_alone(srv: Server, words: int) -> float:
    sid = srv.new_session()
    ws = srv.socket(sid)
    try:
        start = time.perf_counter()
        ws.send("send_message", text=prompt(words))
        ws.event("run_completed", timeout=TIMEOUT / 1000)
        return time.perf_counter() - start
    finally:
        ws.close()


def open_page(page: Page, srv: Server, sid: str) -> float:
    start = time.perf_counter()
    page.goto(f"{srv.base_url}/s/{sid}")
    page.wait_for_selector("#conn[data-state=open]", timeout=TIMEOUT)
    # Until the page has been laid out and painted once.
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))")
    return time.perf_counter() - start


def in_chromium(page: Page, srv: Server, words: int) -> float:
    sid = srv.new_session()
    open_page(page, srv, sid)
    page.fill("#composer-text", prompt(words))
    start = time.perf_counter()
    page.press("#composer-text", "Enter")
    # The last word shown in the turn (its end: nothing else in the page says "fin").
    page.wait_for_function("""() => {
        const t = document.querySelector('#transcript section.turn:last-of-type .bubble-assistant');
        const text = t ? Array.from(t.querySelectorAll('.live, .md'), e => e.textContent)
            .join('') : '';
        return /\\bfin\\s*$/.test(text);
    }""", polling=50, timeout=TIMEOUT)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        srv = Server(data_dir=data, port=free_port(), token="bench-token-0123456789").start()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                    args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{srv.base_url}/login?token={srv.token}")
                server_alone(srv, 20)  # warm-up: the model client, the templates
                in_chromium(page, srv, 20)
                rows = []
                for words in WORDS:
                    alone = statistics.median(server_alone(srv, words) for _ in range(SAMPLES))
                    chrome = statistics.median(in_chromium(page, srv, words)
                                               for _ in range(SAMPLES))
                    rows.append((words, alone, chrome))
                    print(f"  {words} words: server {alone:.2f} s, Chromium {chrome:.2f} s",
                          file=sys.stderr, flush=True)
                long_sid, short_sid = srv.new_session(), srv.new_session()
                srv.run(long_sid, prompt(max(WORDS)))
                srv.run(short_sid, prompt(20))
                open_long = statistics.median(open_page(page, srv, long_sid)
                                              for _ in range(SAMPLES))
                open_short = statistics.median(open_page(page, srv, short_sid)
                                               for _ in range(SAMPLES))
                browser.close()
        finally:
            srv.stop()
    print(f"\nMedians of {SAMPLES} (a fresh session each):\n")
    print("| answer | server alone | in Chromium | ratio | Chromium ms per word |")
    print("| --- | --- | --- | --- | --- |")
    for words, alone, chrome in rows:
        print(f"| {words:,} words | {alone:.2f} s | {chrome:.2f} s | {chrome / alone:.1f}× "
              f"| {chrome / words * 1000:.2f} |")
    print(f"\n| opening a session holding | time |\n| --- | --- |\n"
          f"| one answer of {max(WORDS):,} words | {open_long:.2f} s |\n"
          f"| one answer of 20 words | {open_short:.2f} s |")


if __name__ == "__main__":
    main()
