"""The file panel in real Chromium against a real server: the tree at HEAD and at a DAG node,
a file opened whole and highlighted, a file and the workdir zip downloaded (the zip matches
`git archive` of that commit's workdir/), and uploads (the file picker and drag-and-drop) that
appear as revertable `user-edit` turns."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git

Server = Any
TIMEOUT = 15_000


def archive(path: Path, rev: str) -> dict[str, bytes]:
    out = subprocess.run(["git", "-C", str(path), "archive", "--format=tar", f"{rev}:workdir"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                if m.isfile()}


def entry(page: Page, path: str) -> Any:
    return page.locator(f"#files-panel .files-entry[data-path='{path}']")


def test_tree_file_view_and_downloads(page: Page, login: Any, shared_server: Server,
                                      tmp_path: Path) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "write src/app.py def main():\\n    return 'one'\n"
                                   "write README.md # Title")
    shared_server.run(sid, "write src/app.py def main():\\n    return 'two'\nwrite new.txt n")
    repo = shared_server.session_path(sid)
    login(page, sid)
    page.click("#open-files")
    dialog = page.locator("#files-dialog")
    expect(dialog).to_be_visible()
    expect(entry(page, "src")).to_be_visible(timeout=TIMEOUT)
    expect(entry(page, "new.txt")).to_be_visible()
    entry(page, "src").locator(".files-open").click()
    expect(entry(page, "src/app.py")).to_be_visible(timeout=TIMEOUT)
    entry(page, "src/app.py").locator(".files-open").click()
    view = page.locator("#file-view")
    expect(view.locator(".file-view-path")).to_have_text("src/app.py", timeout=TIMEOUT)
    # Highlighted on the server: Pygments' token classes, line numbers, the whole file.
    expect(view.locator(".file-code .k").first).to_have_text("def")
    expect(view.locator(".file-code .lc")).to_have_count(2)
    expect(view.locator(".file-code")).to_contain_text("return 'two'")

    with page.expect_download() as got:
        entry(page, "src/app.py").locator(".files-dl").click()
    saved = tmp_path / "app.py"
    got.value.save_as(saved)
    assert saved.read_bytes() == (repo / "workdir/src/app.py").read_bytes()

    with page.expect_download() as got:
        page.click("#files-zip")
    zipped = tmp_path / "head.zip"
    # Named in words: the session's title and the branch, no hash.
    assert re.fullmatch(r"[a-z0-9-]+-main\.zip", got.value.suggested_filename), \
        got.value.suggested_filename
    got.value.save_as(zipped)
    with zipfile.ZipFile(zipped) as zf:
        assert {n: zf.read(n) for n in zf.namelist()} == archive(repo, "HEAD")
    page.keyboard.press("Escape")  # closes the file first
    expect(view.locator(".file-view-path")).to_have_count(0)
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    # At a DAG node: the first turn's commit, before new.txt existed.
    old = git(repo, "log", "--format=%H", "--grep", f"Braid-Run: {first['run_id']}",
              "-1").strip()
    if not page.locator("#dag-body").is_visible():
        page.click("[data-toggle-dag]")
    page.locator(f"#dag .dag-node[data-id='{old}']").click()
    page.locator("#dag-detail .dag-browse").click()
    expect(dialog).to_be_visible()
    expect(page.locator("#files-panel")).to_have_attribute("data-ref", old, timeout=TIMEOUT)
    expect(entry(page, "README.md")).to_be_visible()
    expect(entry(page, "new.txt")).to_have_count(0)
    expect(page.locator("#files-upload")).to_have_count(0)  # the past is read-only
    entry(page, "src").locator(".files-open").click()
    entry(page, "src/app.py").locator(".files-open").click()
    expect(view.locator(".file-code")).to_contain_text("return 'one'", timeout=TIMEOUT)
    with page.expect_download() as got:
        page.click("#files-zip")
    zipped = tmp_path / "old.zip"
    assert got.value.suggested_filename.endswith(f"-at-{old[:7]}.zip")
    got.value.save_as(zipped)
    with zipfile.ZipFile(zipped) as zf:
        assert {n: zf.read(n) for n in zf.namelist()} == archive(repo, old)


def test_upload_and_drop_are_revertable_user_edits(page: Page, login: Any,
                                                   shared_server: Server,
                                                   tmp_path: Path) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write keep.txt keep")
    repo = shared_server.session_path(sid)
    login(page, sid)
    page.click("#open-files")
    expect(entry(page, "keep.txt")).to_be_visible(timeout=TIMEOUT)
    picked = tmp_path / "picked.md"
    picked.write_text("# picked\n")
    page.set_input_files("#files-input", str(picked))
    expect(entry(page, "picked.md")).to_be_visible(timeout=TIMEOUT)
    assert (repo / "workdir/picked.md").read_text() == "# picked\n"
    assert "Braid-Kind: user-edit" in git(repo, "log", "-1", "--format=%B")
    page.keyboard.press("Escape")

    # Dropped on the page (as a file manager would).
    page.evaluate("""() => {
        const dt = new DataTransfer();
        dt.items.add(new File(["dropped text\\n"], "dropped.txt", {type: "text/plain"}));
        const target = document.getElementById('transcript');
        for (const type of ['dragenter', 'dragover', 'drop']) {
            target.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true,
                                                      cancelable: true}));
        }
    }""")
    upload_turn = page.locator("section.turn-upload", has_text="dropped.txt")
    expect(upload_turn).to_be_visible(timeout=TIMEOUT)
    expect(upload_turn.locator(".chip[data-path='dropped.txt']")).to_be_visible()
    assert (repo / "workdir/dropped.txt").read_text() == "dropped text\n"
    # Revertable like a turn: the file goes, Redo brings it back.
    upload_turn.locator(".revert-btn").click()
    upload_turn.locator(".confirm-revert").click()
    expect(upload_turn.locator(".badge-reverted")).to_be_visible(timeout=TIMEOUT)
    assert not (repo / "workdir/dropped.txt").exists()
    assert (repo / "workdir/picked.md").exists()
    upload_turn.locator(".redo-btn").click()
    expect(upload_turn.locator(".badge-reverted")).to_have_count(0, timeout=TIMEOUT)
    assert (repo / "workdir/dropped.txt").exists()
    # Both uploads show after a reload too.
    page.reload()
    expect(page.locator("section.turn-upload")).to_have_count(2)
