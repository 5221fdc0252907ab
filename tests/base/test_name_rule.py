"""The one name rule (names.py) is git's own: `why_not` refuses exactly the paths git's
`verify_path` refuses with its NTFS and HFS protections on (asked of the git CLI), plus
what git allows and Braid does not: a part over 255 bytes, a name that is not UTF-8."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from server.base import names

# Paths git holds and paths it refuses, in the spellings issue 21 met and their neighbours.
NAMES = [
    # held
    "a", "a/b/c.txt", ".gitignore", ".gitattributes", ".github/workflows/ci.yml", ".gitx",
    "x.git", "a/.git2", "git", "git~2", "GIT~10", "git~1x", ".git-foo", ".gi t", "..a", "a..",
    ".a", "a b", "é/ü.txt", "日本/語", ".gitmodules", "a/.gitmodules", ".g\u200dx",
    "a:b", "con", "nul.txt", ".git~1", "git ~1",
    # refused
    ".git", ".GIT", ".Git/config", ".gIt/x", "a/.git/b", "a/.GIT", "git~1", "GIT~1/x",
    "a/Git~1/y", ".git.", ".git./x", ".git ", ".gIt /x", ".git. . .", ".git.. ",
    ".git::$INDEX_ALLOCATION", ".git::$INDEX_ALLOCATION/x", "git~1::$INDEX_ALLOCATION/x",
    ".git:x", "git~1.", "GIT~1 /x",
    ".g\u200cit", ".git\u200c", "\u200c.git/x", ".g\ufeffit", ".\u206agit", ".GI\u200fT/x",
    "a\\.git", "a\\git~1\\x", ".git\\x",
    "..", "a/../b", ".", "./a", "a/./b", "a//b", "/a", "a/", "",
]


def git_holds(repo: Path, blob: str, path: str) -> bool:
    """git's verify_path, with both protections, by adding `path` to an empty index."""
    index = repo / "probe-index"
    index.unlink(missing_ok=True)
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "core.protectNTFS=true", "-c", "core.protectHFS=true",
         "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"],
        env={**os.environ, "GIT_INDEX_FILE": str(index)}, capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("names")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    blob = subprocess.run(["git", "-C", str(path), "hash-object", "-w", "--stdin"],
                          input=b"x\n", capture_output=True, check=True).stdout.decode().strip()
    return path, blob


@pytest.mark.parametrize("path", NAMES)
def test_why_not_is_gits_verify_path(repo: tuple[Path, str], path: str) -> None:
    folder, blob = repo
    held = git_holds(folder, blob, path)
    assert (names.why_not(path) is None) == held, (path, names.why_not(path), held)
    if held:
        assert names.check_path(path) == path
    else:
        with pytest.raises(names.BadName) as refused:
            names.check_path(path)
        assert refused.value.code == "bad_request"


def test_the_list_holds_both_kinds(repo: tuple[Path, str]) -> None:
    folder, blob = repo
    held = [p for p in NAMES if git_holds(folder, blob, p)]
    assert 20 < len(held) < len(NAMES) - 30


def test_a_part_over_255_bytes_is_refused_though_git_takes_it(repo: tuple[Path, str]) -> None:
    folder, blob = repo
    for path in ("a" * 256, "d/" + "é" * 128, "x" * 300 + "/y"):
        assert git_holds(folder, blob, path)  # git has no limit: file systems do
        assert names.why_not(path) == "a part longer than 255 bytes"
    assert names.why_not("a" * 255) is None and names.why_not("é" * 127 + "a") is None


def test_a_name_that_is_not_utf8_is_refused_though_git_takes_it(repo: tuple[Path, str]
                                                                ) -> None:
    folder, blob = repo
    raw = b"bad\xff.txt"
    done = subprocess.run(
        [b"git", b"-C", os.fsencode(folder), b"update-index", b"--add", b"--cacheinfo",
         b"100644," + blob.encode() + b"," + raw],
        env={**os.environ, "GIT_INDEX_FILE": str(folder / "probe-index")}, capture_output=True)
    assert done.returncode == 0
    name = os.fsdecode(raw)
    assert names.why_not(name) == "not valid UTF-8"
    assert names.why_not(f"ok/{name}/x") == "not valid UTF-8"
    assert names.skipped_entry(name, "not valid UTF-8") == {
        "path": "bad\\xff.txt", "reason": "not valid UTF-8"}
    assert names.why_not("a\0b") == "contains a NUL byte"


def test_a_nested_repository_listed_by_git_status_is_left_out_with_its_reason(
        tmp_path: Path) -> None:
    """`git status` lists an untracked nested repository as `dir/`: the scan never enters
    it, so the checkpoint lists it as left out, saying why (not "empty part")."""
    from server.git.workdir.scan import why_left_out

    (tmp_path / "inner").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "inner")], check=True)
    assert why_left_out(tmp_path, "inner/") == "a nested git repository"
    assert why_left_out(tmp_path, "inner.txt") is None
