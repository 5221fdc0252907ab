"""A download's file name in words (issue 23): the session's title and the branch as people
read it, never `workdir-run-<hex>.zip`."""

from __future__ import annotations

from server.features.files import download_name


def test_a_zip_is_named_by_the_sessions_title_and_the_branch_in_words() -> None:
    assert download_name("My Notes!", "main") == "my-notes-main.zip"
    assert download_name("My Notes", "sub_0123456789_red_0123abcd") == \
        "my-notes-sub-agent-red.zip"
    assert download_name("", "run/" + "a" * 32) == "session-another-version.zip"
    assert download_name("x", "b" * 40) == "x-at-bbbbbbb.zip"
    assert download_name("Ünïcode / path", "main") == "unicode-path-main.zip"
    assert download_name("日本", "main") == "session-main.zip"
