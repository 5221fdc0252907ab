"""A light and a dark theme that follow the system (issue 23): in real Chromium with
`color_scheme` light and dark, the page's surfaces are light or dark, and its text (the title,
answers, code, the composer, muted lines, buttons, file chips, toasts, the History panel) is
readable on what is behind it (WCAG contrast of at least 4.5:1, 3:1 for large text)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import send_from_page

Server = Any
TIMEOUT = 20_000

# The luminance of an element's colour and of the first opaque background behind it.
CONTRAST = """(selectors) => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = (c) => { const f = (v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const behind = (el) => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; }
    return parse(getComputedStyle(document.documentElement).backgroundColor)
      || {r: 255, g: 255, b: 255, a: 1}; };
  const out = [];
  for (const sel of selectors) {
    const el = document.querySelector(sel);
    if (!el) { out.push({sel, missing: true}); continue; }
    const s = getComputedStyle(el);
    const fg = lum(parse(s.color)), bg = lum(behind(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    const size = parseFloat(s.fontSize);
    const large = size >= 18.5 || (size >= 14 && +s.fontWeight >= 700);
    out.push({sel, ratio: Math.round(ratio * 100) / 100, need: large ? 3 : 4.5,
              bg: Math.round(bg * 1000) / 1000});
  }
  return out;
}"""

TEXT = ["#session-title", ".bubble-user", ".bubble-assistant .md p", ".md pre.hl code",
        ".md pre .hl-tok, .md pre.hl code span", "#composer-text", ".msg-meta .ts",
        ".copy-btn", "#send-btn", ".chip", ".branch-badge", ".session-item.active",
        ".dag-title", ".dag-label", "#toasts .toast span", ".turn-usage", ".conn-text",
        "#fork-session", "#model-select"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_theme_follows_the_system(page: Page, login: Any, shared_server: Server,
                                      scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 1400, "height": 900})
    sid = shared_server.new_session()
    shared_server.run(sid, "write notes/a.py print('hi')\nsay Here:\n"
                           "say ```python\nsay def f(x):\nsay     return x  # twice\nsay ```")
    login(page, sid)
    page.fill("#composer-text", "fail boom")
    page.press("#composer-text", "Enter")
    expect(page.locator("#toasts .toast")).to_contain_text("boom", timeout=TIMEOUT)
    expect(page.locator("#dag .dag-label").first).to_be_visible(timeout=TIMEOUT)
    page.fill("#composer-text", "")  # the placeholder is not what is measured
    page.locator("#composer-text").evaluate("el => { el.value = 'typed text'; }")

    body_bg = page.evaluate("""() => { const c = getComputedStyle(document.body).backgroundColor
        .match(/\\d+/g).map(Number); return (c[0] + c[1] + c[2]) / 3; }""")
    if scheme == "dark":
        assert body_bg < 60, body_bg
    else:
        assert body_bg > 200, body_bg
    results = page.evaluate(CONTRAST, TEXT)
    missing = [r["sel"] for r in results if r.get("missing")]
    assert len(missing) <= 1, missing  # one of the two code selectors is enough
    poor = [r for r in results if not r.get("missing") and r["ratio"] < r["need"]]
    assert not poor, f"{scheme}: text hard to read: {poor}"
    # The surfaces are of the scheme (not a light card on a dark page, or the reverse).
    for sel in (".bubble-assistant", ".composer", ".topbar", "#dag-panel", ".md pre"):
        bg = page.evaluate(
            "(sel) => { const c = getComputedStyle(document.querySelector(sel)).backgroundColor"
            ".match(/\\d+/g).map(Number); return (c[0] + c[1] + c[2]) / 3; }", sel)
        assert (bg < 80) if scheme == "dark" else (bg > 200), (sel, bg)
    # A streamed answer reads as well as a finished one.
    run_id = send_from_page(page, "slow 30\nsay " + " ".join(f"w{i}" for i in range(60)))
    page.wait_for_function("(id) => { const l = document.getElementById('live-' + id); "
                           "return l && l.textContent.length > 20; }", arg=run_id,
                           timeout=TIMEOUT)
    live = page.evaluate(CONTRAST, [f"#live-{run_id}"])[0]
    if not live.get("missing"):
        assert live["ratio"] >= 4.5, live
