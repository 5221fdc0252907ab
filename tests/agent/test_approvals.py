"""The approvals gate's rules (agent/approvals.py): which tool waits in which mode, a tool
answered `always`, and the diff a waiting file tool shows (old vs new content, read from a
real workdir, never past it)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from server.agent.approvals import denied_text, needs_approval, preview
from server.base.records import SessionMeta, new_session_meta

FILE_TOOLS = ("write_file", "edit_file", "apply_patch", "delete_file")
READS = ("read_file", "list_files")


def meta(**extra: object) -> SessionMeta:
    return cast(SessionMeta, {**new_session_meta("0" * 32, "t", "local"), **extra})


@pytest.mark.parametrize("tool", FILE_TOOLS + READS + ("shell",))
def test_which_tool_waits_in_which_mode(tool: str) -> None:
    assert not needs_approval(meta(), tool)
    assert not needs_approval(meta(approvals="auto"), tool)
    assert needs_approval(meta(approvals="shell"), tool) == (tool == "shell")
    assert needs_approval(meta(approvals="writes"), tool) == (tool not in READS)
    # Answered `always`: that tool no longer waits; the others still do.
    always = meta(approvals="writes", approvals_always=[tool])
    assert not needs_approval(always, tool)
    assert needs_approval(always, "delete_file") == (tool != "delete_file")
    assert not needs_approval(meta(approvals="bogus"), tool)  # an unknown mode: auto


def test_the_diff_of_each_file_tool(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    write = preview(tmp_path, "write_file", {"path": "a.txt", "content": "one\n2\n"})
    assert write is not None
    assert "--- a/a.txt\n+++ b/a.txt\n" in write and "-two\n" in write and "+2\n" in write
    new = preview(tmp_path, "write_file", {"path": "new.txt", "content": "fresh"})
    assert new is not None and "+fresh\n" in new
    edit = preview(tmp_path, "edit_file", {"path": "a.txt", "old_text": "two",
                                           "new_text": "TWO"})
    assert edit is not None and "-two\n" in edit and "+TWO\n" in edit
    appended = preview(tmp_path, "edit_file", {"path": "a.txt", "old_text": "",
                                               "new_text": "three\n"})
    assert appended is not None and "+three\n" in appended
    # old_text not found once: the tool will refuse; no diff is made up.
    assert preview(tmp_path, "edit_file", {"path": "a.txt", "old_text": "zzz",
                                           "new_text": "x"}) is None
    gone = preview(tmp_path, "delete_file", {"path": "a.txt"})
    assert gone is not None and "-one\n" in gone and "-two\n" in gone
    assert preview(tmp_path, "apply_patch", {"patch": "--- a/x\n+++ b/x\n"}) == \
        "--- a/x\n+++ b/x\n"
    assert preview(tmp_path, "shell", {"command": "ls"}) is None
    # Never read past the workdir.
    (tmp_path.parent / "secret.txt").write_text("secret")
    assert preview(tmp_path, "write_file", {"path": "../secret.txt", "content": ""}) is None
    assert preview(tmp_path, "delete_file", {"path": "/etc/passwd"}) is None


def test_the_denial_the_model_reads() -> None:
    assert denied_text("not now") == "denied by the user: not now"
    assert denied_text("  ") == "denied by the user: no reason given"
