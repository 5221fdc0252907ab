"""In real Chromium: "New session from…" a folder (a git work tree), a turn, then "Export
to branch" and "Export to folder", end to end, the results checked with the git CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from conftest import git, send_from_page

TIMEOUT = 15_000


def test_new_session_from_a_folder_then_export_to_branch(page: Page, server_factory: Any,
                                                         tmp_path: Path) -> None:
    roots = tmp_path / "home"
    project = roots / "project"
    (project / "node_modules" / "dep").mkdir(parents=True)
    (project / "node_modules" / "dep" / "index.js").write_text("x\n")
    (project / ".gitignore").write_text("node_modules/\n")
    (project / "README.md").write_text("# project\n")
    (project / "big.bin").write_bytes(b"b" * 2048)
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "start")
    head = git(project, "rev-parse", "HEAD").strip()
    srv = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_FILE="1024")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    first_url = page.url

    # A path outside the allowed folders: the form says why, nothing is created.
    page.click("#new-from-toggle")
    page.fill("#new-from-where", str(tmp_path))
    page.click("#new-from-submit")
    expect(page.locator("#new-from-error")).to_contain_text("BRAID_IMPORT_ROOTS")
    assert page.url == first_url

    page.fill("#new-from-where", str(project))
    page.click("#new-from-submit")
    page.wait_for_url(lambda url: url != first_url, timeout=TIMEOUT)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    expect(page.locator("#session-title")).to_have_text("project")
    source = page.locator("#source-panel")
    expect(source).to_contain_text(str(project))
    expect(page.locator("#source-skipped")).to_contain_text("1 file skipped")
    page.click("#source-skipped summary")
    expect(page.locator("#source-skipped")).to_contain_text("big.bin")
    session_id = page.url.rsplit("/", 1)[1]
    workdir = srv.session_path(session_id) / "workdir"
    assert sorted(p.name for p in workdir.iterdir()) == [".gitignore", "README.md"]

    send_from_page(page, "append README.md from the agent\nsay edited the readme",
                   until_done=True)
    page.click("#export-branch")
    result = page.locator("#export-result")
    expect(result).to_contain_text("Exported 1 commit to branch", timeout=TIMEOUT)
    branch = page.locator("#export-branch-name").inner_text()
    assert branch.startswith("braid/project-")
    assert git(project, "rev-parse", f"{branch}^").strip() == head
    assert git(project, "show", f"{branch}:README.md") == "# project\nfrom the agent\n"
    assert (project / "README.md").read_text() == "# project\n"  # the work tree untouched
    assert git(project, "status", "--porcelain") == ""
    assert git(project, "rev-parse", "HEAD").strip() == head

    # Export to folder: the user's own change there is a listed conflict, left alone.
    (project / "README.md").write_text("# project, edited by me\n")
    page.click("#export-folder summary")
    expect(page.locator("#export-path")).to_have_value(str(project))
    page.click("#export-folder-submit")
    expect(result).to_contain_text("Not written", timeout=TIMEOUT)
    expect(result.locator(".export-conflicts")).to_contain_text("README.md")
    assert (project / "README.md").read_text() == "# project, edited by me\n"
    assert errors == []
