"""The export panel's partial (`#export-result`) for a folder export's `skipped` list and a
clash error's `details.conflicts`: every name in plain words, escaped (a path may be hostile).
The renderers are sync here (an async test after the browser tests would share their loop);
the browser side (the socket's frame swapped in) is playwright/test_import_page.py."""

from __future__ import annotations

from server.base import names
from server.base.errors import Conflict
from server.web.import_views import exported_html, failed_html

HOSTILE = "<img src=x onerror=alert(1)>.md"


def test_a_folder_export_lists_what_it_skipped_and_why_escaped() -> None:
    data = {"path": "/home/u/p", "written": ["a.txt"], "deleted": [], "conflicts": [],
            "skipped": [names.skipped_entry(HOSTILE, "changed in the folder meanwhile"),
                        names.skipped_entry("bad\udcff.txt", "not valid UTF-8")]}
    html = exported_html(data)
    assert "Wrote 1 file" in html and "Left out, not written:" in html
    assert "<code>&lt;img src=x onerror=alert(1)&gt;.md</code> — changed in the folder " \
           "meanwhile" in html
    assert "<code>bad\\xff.txt</code> — not valid UTF-8" in html
    assert "<img" not in html


def test_a_clash_error_lists_each_path_and_says_nothing_was_written() -> None:
    conflicts = [{"path": HOSTILE, "ours": "added", "theirs": "folder"},
                 {"path": "sub/a.txt", "ours": "modified", "theirs": "symlink"},
                 {"path": "notes.txt", "ours": "modified", "theirs": "modified"},
                 {"path": "x"}, "not a conflict", {"path": 3}]  # odd shapes: shown or skipped
    error = Conflict("3 file(s) clash: nothing was written", {"conflicts": conflicts}).as_dict()
    html = failed_html(error)
    assert "Nothing was written to the folder. In the way:" in html
    assert "&lt;img src=x onerror=alert(1)&gt;.md</code> — a folder is there (added in " \
           "this session)" in html
    assert "sub/a.txt</code> — a symlink stands where its folder must go" in html
    assert "notes.txt</code> — changed there since (changed in this session)" in html
    assert "<code>x</code></li>" in html
    assert "<img" not in html


def test_another_error_shows_its_message_only() -> None:
    error = Conflict("cannot export to /p: a is a symlink, not a folder").as_dict()
    html = failed_html(error)
    assert "a is a symlink, not a folder" in html and "Nothing was written" not in html
