"""dirhandles.py on real folders: nothing is followed, temporary names are private, a name a
session may hold but git may not is skipped by the export plan (DESIGN §4 "Boundaries")."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from server.base.dirhandles import Blocked, Folder, open_path, put_file
from server.features.sources.exporting import _plan


def opened(path: Path) -> Folder:
    folder = Folder.open(path, create=False)
    assert folder is not None
    return folder


@pytest.fixture
def target(tmp_path: Path) -> Path:
    (tmp_path / "t" / "d").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "t" / "d" / "f.txt").write_text("f\n")
    (tmp_path / "t" / "tool.sh").write_text("#!/bin/sh\n")
    (tmp_path / "t" / "tool.sh").chmod(0o755)
    os.symlink(tmp_path / "outside", tmp_path / "t" / "out")
    os.symlink("d/f.txt", tmp_path / "t" / "link")
    os.symlink(tmp_path / "t", tmp_path / "t-link")
    return tmp_path / "t"


def test_lookup_follows_nothing(target: Path) -> None:
    with opened(target) as folder:
        assert folder.lookup("d/f.txt") == (pygit2.hash(b"f\n"), int(FileMode.BLOB))
        assert folder.lookup("tool.sh") == (pygit2.hash(b"#!/bin/sh\n"),
                                            int(FileMode.BLOB_EXECUTABLE))
        assert folder.lookup("link") == (pygit2.hash(b"d/f.txt"), int(FileMode.LINK))
        assert folder.lookup("d") == "folder"
        assert folder.lookup("nothing/here") is None
        blocked = folder.lookup("out/x.txt")
        assert isinstance(blocked, Blocked) and (blocked.prefix, blocked.what) == ("out",
                                                                                   "symlink")
        blocked = folder.lookup("d/f.txt/x")
        assert isinstance(blocked, Blocked) and blocked.what == "file"
        with pytest.raises(Blocked):
            folder.dir_fd("out/new", create=True)
    assert not (target.parent / "outside" / "new").exists()
    with pytest.raises(Blocked):  # the folder itself reached through a symlink
        open_path(target.parent / "t-link" / "d", create=False)


def test_private_folder_and_moves(target: Path) -> None:
    with opened(target) as folder:
        name = folder.private_name()
        tmp = folder.make_private(name)
        assert stat.S_IMODE(os.stat(target / name).st_mode) == 0o700
        with pytest.raises(FileExistsError):  # never reused, nor followed if planted
            folder.make_private(name)
        put_file(tmp, "w0", b"new\n", FileMode.BLOB)
        put_file(tmp, "w1", b"../../outside/x", FileMode.LINK)
        assert folder.move_in(tmp, "w0", "a/b/c.txt")
        assert folder.move_in(tmp, "w1", "a/l")
        assert not folder.move_in(tmp, "w0", "a/b/c.txt")  # a retry: moved already
        assert folder.move_out("link", tmp, "d0") and not folder.move_out("link", tmp, "d0")
        assert not folder.move_out("d", tmp, "d1")  # never a folder
        os.close(tmp)
        folder.remove_private(name)
    assert (target / "a" / "b" / "c.txt").read_text() == "new\n"
    assert os.readlink(target / "a" / "l") == "../../outside/x"
    assert not (target / "link").exists() and (target / "d" / "f.txt").exists()
    assert sorted(os.listdir(target)) == ["a", "d", "out", "tool.sh"]
    assert os.listdir(target.parent / "outside") == []


def test_a_private_folder_swapped_is_left_alone(target: Path) -> None:
    with opened(target) as folder:
        name = folder.private_name()
        os.close(folder.make_private(name))
        os.rename(target / name, target / "mine")
        (target / name).mkdir()  # someone else's folder under the name
        (target / name / "theirs.txt").write_text("x\n")
        folder.remove_private(name)
        assert (target / name / "theirs.txt").exists()


def test_the_plan_skips_names_git_cannot_hold(target: Path) -> None:
    blob = (pygit2.hash(b"x\n"), int(FileMode.BLOB))
    ours = {"ok.txt": blob, "a\\.git/config": blob, "x" * 300: blob, "sub/.GIT/HEAD": blob}
    with opened(target) as folder:
        plan = _plan(folder, {}, ours, force=True)
    assert [rel for rel, _ in plan.writes] == ["ok.txt"]
    assert sorted(s["path"][:12] for s in plan.skipped) == ["a\\.git/confi", "sub/.GIT/HEA",
                                                           "xxxxxxxxxxxx"]
