"""Red-team of issue 21: an upload refused (a name git cannot hold, over the size limit) must
say why where the user is looking. Uploads are made from the Files dialog, a modal <dialog>
in the browser's top layer: a toast in the page's own #toasts sits under it, cut off."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

TIMEOUT = 15_000

_ON_TOP = """(text) => {
  const shown = Array.from(document.querySelectorAll("[role=alert]"))
    .filter((e) => e.textContent.includes(text) && e.getClientRects().length);
  return shown.some((e) => {
    const r = e.getBoundingClientRect();
    const y = r.top + r.height / 2;
    return [r.left + 4, r.left + r.width / 2].every((x) => {
      const hit = document.elementFromPoint(x, y);
      return hit && e.contains(hit);
    });
  });
}"""


def test_a_refused_upload_says_why_on_top_of_the_files_dialog(
        page: Page, server_factory: Any, console_errors: Any) -> None:
    console_errors.allow(r"status of (400|413)")  # the browser's own line for a refused fetch
    srv = server_factory(BRAID_IMPORT_MAX_BYTES="1000")
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    page.click("#open-files")
    page.wait_for_selector("#files-input", state="attached", timeout=TIMEOUT)
    for name, data, why in ((".Git", b"x", "names the repository's .git folder"),
                            ("big.bin", b"x" * 5000, "at most 1000 bytes")):
        page.set_input_files("#files-input", files=[
            {"name": name, "mimeType": "application/octet-stream", "buffer": data}])
        page.wait_for_function(_ON_TOP, arg=why, timeout=TIMEOUT)
    expect(page.locator("#files-dialog")).to_be_visible()
