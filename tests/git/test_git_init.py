"""`git_init.init_repository` makes what `pygit2.init_repository` makes (without the
repository pygit2 leaks): a non-bare repository, its unborn branch named, usable by git and
pygit2, and a clear error where no repository can be made."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from conftest import git
from server.git.init_repo import init_repository


def test_a_new_repository_like_pygit2s(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours" / "deep", tmp_path / "theirs"
    init_repository(ours, "trunk")  # the missing parents are made
    pygit2.init_repository(str(theirs), bare=False, initial_head="trunk")
    for path in (ours, theirs):
        assert (path / ".git" / "HEAD").read_text() == "ref: refs/heads/trunk\n"
        repo = pygit2.Repository(str(path))
        assert not repo.is_bare and repo.head_is_unborn
        (path / "a.txt").write_text("a\n")
        git(path, "add", "a.txt")
        git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
        assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "trunk\n"
        git(path, "fsck", "--strict")
    assert sorted(p.name for p in (ours / ".git").iterdir()) == \
        sorted(p.name for p in (theirs / ".git").iterdir())


def test_no_repository_where_a_file_is(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(pygit2.GitError):
        init_repository(tmp_path / "file" / "repo", "main")
