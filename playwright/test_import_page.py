"""In real Chromium: "New session from…" a folder (a git work tree), a turn, then "Export
to branch" and "Export to folder", end to end, the results checked with the git CLI."""

from __future__ import annotations

import re
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
    expect(result).to_contain_text("(created)")
    branch = page.locator("#export-branch-name").inner_text()
    assert branch.startswith("braid/project-")
    assert git(project, "rev-parse", f"{branch}^").strip() == head
    assert git(project, "show", f"{branch}:README.md") == "# project\nfrom the agent\n"
    assert (project / "README.md").read_text() == "# project\n"  # the work tree untouched
    assert git(project, "status", "--porcelain") == ""
    assert git(project, "rev-parse", "HEAD").strip() == head

    page.click("#update-source")
    expect(result).to_contain_text("The source has not changed", timeout=TIMEOUT)

    # Export to folder: the user's own change there is a listed conflict, left alone.
    (project / "README.md").write_text("# project, edited by me\n")
    page.click("#export-folder summary")
    expect(page.locator("#export-path")).to_have_value(str(project))
    page.click("#export-folder-submit")
    expect(result).to_contain_text("Not written", timeout=TIMEOUT)
    expect(result.locator(".export-conflicts")).to_contain_text("README.md")
    assert (project / "README.md").read_text() == "# project, edited by me\n"
    assert errors == []


def _tree(root: Path) -> dict[str, str]:
    """Every entry under `root` as it is on disk (symlinks not followed): to see that an
    export wrote nothing, not even a private staging folder."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + str(path.readlink())
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_text()
    return out


def test_export_to_folder_clash_lists_each_path_and_writes_nothing(
        page: Page, server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    project = roots / "project"
    (project / "sub").mkdir(parents=True)
    (project / "README.md").write_text("# project\n")
    (project / "notes.txt").write_text("notes\n")
    (project / "sub" / "a.txt").write_text("a\n")
    elsewhere = tmp_path / "elsewhere"  # where a symlink in the folder points: never written
    elsewhere.mkdir()
    (elsewhere / "a.txt").write_text("outside\n")
    hostile = "<b>bold<b>.md"  # a name the page must show as text, never as markup
    srv = server_factory(BRAID_IMPORT_ROOTS=str(roots))
    page.goto(f"{srv.base_url}/login?token={srv.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    first_url = page.url
    page.click("#new-from-toggle")
    page.fill("#new-from-where", str(project))
    page.click("#new-from-submit")
    page.wait_for_url(lambda url: url != first_url, timeout=TIMEOUT)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=TIMEOUT)
    send_from_page(page, "append README.md from the agent\nappend notes.txt more\n"
                         f"append sub/a.txt b\nwrite {hostile} new\nsay changed four files",
                   until_done=True)

    # The user, meanwhile, puts a folder where README.md and the new file go, a symlink
    # where the folder sub/ goes, and changes notes.txt.
    (project / "README.md").unlink()
    (project / "README.md").mkdir()
    (project / "README.md" / "keep.txt").write_text("mine\n")
    (project / hostile).mkdir()
    (project / "sub" / "a.txt").unlink()
    (project / "sub").rmdir()
    (project / "sub").symlink_to(elsewhere)
    (project / "notes.txt").write_text("notes, mine\n")
    before, outside = _tree(project), _tree(elsewhere)

    page.click("#export-folder summary")
    page.check(".export-force input")  # force overrides a changed file, never a clash
    page.click("#export-folder-submit")
    result = page.locator("#export-result")
    expect(result).to_contain_text("Nothing was written", timeout=TIMEOUT)
    expect(result).to_have_class(re.compile(r"\bexport-error\b"))
    items = result.locator("#export-clashes li")
    expect(items).to_have_count(3)
    expect(items.nth(0)).to_have_text(
        f"{hostile} — a folder is there (added in this session)")
    expect(items.nth(1)).to_have_text("README.md — a folder is there (changed in this session)")
    expect(items.nth(2)).to_contain_text("sub/a.txt — a symlink stands where its folder")
    assert result.locator("b").count() == 0  # the hostile name stayed text
    assert _tree(project) == before and _tree(elsewhere) == outside

    # Without force the user's changed file is listed too, in words.
    page.uncheck(".export-force input")
    page.click("#export-folder-submit")
    expect(items).to_have_count(4, timeout=TIMEOUT)
    expect(result.locator("#export-clashes")).to_contain_text(
        "notes.txt — changed there since (changed in this session)")
    assert _tree(project) == before and _tree(elsewhere) == outside
