"""The export panel's partial (`#export-result`) for a folder export's `skipped` list and a
clash error's `details.conflicts`: every name in plain words, escaped (a path may be hostile).
The browser side (the socket's frame swapped in) is playwright/test_import_page.py."""

from __future__ import annotations

from server.core import names
from server.core.errors import Conflict
from server.web.import_views import IMPORT_ERRORS, IMPORT_RESULTS

HOSTILE = "<img src=x onerror=alert(1)>.md"


async def test_a_folder_export_lists_what_it_skipped_and_why_escaped() -> None:
    data = {"path": "/home/u/p", "written": ["a.txt"], "deleted": [], "conflicts": [],
            "skipped": [names.skipped_entry(HOSTILE, "changed in the folder meanwhile"),
                        names.skipped_entry("bad\udcff.txt", "not valid UTF-8")]}
    html = await IMPORT_RESULTS["export_session"](None, data)  # type: ignore[arg-type]
    assert "Wrote 1 file" in html and "Left out, not written:" in html
    assert "<code>&lt;img src=x onerror=alert(1)&gt;.md</code> — changed in the folder " \
           "meanwhile" in html
    assert "<code>bad\\xff.txt</code> — not valid UTF-8" in html
    assert "<img" not in html


async def test_a_clash_error_lists_each_path_and_says_nothing_was_written() -> None:
    conflicts = [{"path": HOSTILE, "ours": "added", "theirs": "folder"},
                 {"path": "sub/a.txt", "ours": "modified", "theirs": "symlink"},
                 {"path": "notes.txt", "ours": "modified", "theirs": "modified"},
                 {"path": "x"}, "not a conflict", {"path": 3}]  # odd shapes: shown or skipped
    error = Conflict("3 file(s) clash: nothing was written", {"conflicts": conflicts}).as_dict()
    html = await IMPORT_ERRORS["export_session"](None, error)  # type: ignore[arg-type]
    assert "Nothing was written to the folder: 4 paths clash with what is there." in html
    assert "&lt;img src=x onerror=alert(1)&gt;.md</code> — a folder is there (added in " \
           "this session)" in html
    assert "sub/a.txt</code> — a symlink stands where its folder must go" in html
    assert "notes.txt</code> — changed there since (changed in this session)" in html
    assert "<code>x</code></li>" in html
    assert "<img" not in html


async def test_another_error_shows_its_message_only() -> None:
    error = Conflict("cannot export to /p: a is a symlink, not a folder").as_dict()
    html = await IMPORT_ERRORS["export_session"](None, error)  # type: ignore[arg-type]
    assert "a is a symlink, not a folder" in html and "Nothing was written" not in html
