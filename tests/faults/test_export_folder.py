"""Export to a folder never writes through a symlink (issue 21 row 4), keeps a session's
symlinks as symlinks (row 16), refuses a file/folder clash as a `conflict` with nothing
written (row 15), and never exports into a `.git` folder (row 1's way in). A real server, real
repositories checked with the git CLI; DESIGN §4 "Boundaries"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Server, assert_fsck, git

GIT_USER = ["-c", "user.name=T", "-c", "user.email=t@x"]
LINK = "../../../outside/victim.txt"  # from roots/repo/src: out of the folder and the roots


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    (tmp_path / "roots").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("victim\n")
    return tmp_path / "roots"


def hostile_repo(roots: Path) -> Path:
    """A repository whose commit plants symlinks at the temporary names an exporter might
    use beside src/main.py, and a plain symlink."""
    work = roots / "repo"
    (work / "src").mkdir(parents=True)
    (work / "lib").mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "src" / "main.py").write_text("print('v1')\n")
    (work / "lib" / "util.py").write_text("x = 1\n")
    for name in (".main.py.braid-tmp", ".main.py.tmp", "main.py.tmp", ".braid-tmp"):
        os.symlink(LINK, work / "src" / name)
    os.symlink("main.py", work / "src" / "alias.py")
    git(work, "add", "-A")
    git(work, *GIT_USER, "commit", "-qm", "v1")
    return work


def files_of(folder: Path) -> dict[str, str]:
    """Every file and symlink under `folder` (a symlink as `-> target`), nothing followed."""
    out: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_text()
    return out


@pytest.mark.slow
def test_export_never_writes_through_a_symlink(srv: Server, roots: Path,
                                               tmp_path: Path) -> None:
    work = hostile_repo(roots)
    status, created = srv.api("POST", "/api/sessions", {"source": {"git": str(work)}})
    assert status == 201, created
    sid = created["session_id"]
    srv.run(sid, "write src/main.py print('agent')")
    status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                          {"to": "folder", "path": str(work), "force": True})
    assert status == 200, out
    assert out["written"] == ["src/main.py"] and out["conflicts"] == []
    victim = tmp_path / "outside" / "victim.txt"
    assert victim.read_text() == "victim\n"  # row 4: the agent's text never got there
    main = work / "src" / "main.py"
    assert not main.is_symlink() and main.read_text() == "print('agent')\n"
    for name in (".main.py.braid-tmp", ".main.py.tmp", "main.py.tmp", ".braid-tmp"):
        assert os.readlink(work / "src" / name) == LINK
    assert not [p for p in work.iterdir() if p.name.startswith(".braid-export")]
    assert os.listdir(tmp_path / "outside") == ["victim.txt"]

    # A folder on the way swapped for a symlink out of the roots: a conflict for that path,
    # never followed, with force too, and nothing else of the export written.
    (tmp_path / "outside" / "lib").mkdir()
    (work / "lib" / "util.py").rename(tmp_path / "outside" / "lib" / "util.py")
    (work / "lib").rmdir()
    os.symlink(tmp_path / "outside" / "lib", work / "lib")
    srv.run(sid, "write lib/util.py x = 2\nwrite lib/new.py y\nwrite src/main.py print(3)")
    for force in (False, True):
        status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                              {"to": "folder", "path": str(work), "force": force})
        assert status == 409 and out["error"]["code"] == "conflict", out
        conflicts = out["error"]["details"]["conflicts"]
        assert {c["path"]: c["theirs"] for c in conflicts} == {
            "lib/new.py": "symlink", "lib/util.py": "symlink"}, conflicts
    assert sorted(os.listdir(tmp_path / "outside" / "lib")) == ["util.py"]
    assert (tmp_path / "outside" / "lib" / "util.py").read_text() == "x = 1\n"
    assert main.read_text() == "print('agent')\n"  # all or nothing
    assert victim.read_text() == "victim\n"
    assert_fsck(srv.session_path(sid))


def test_symlinks_are_exported_as_symlinks(srv: Server, roots: Path, tmp_path: Path) -> None:
    work = hostile_repo(roots)
    _, created = srv.api("POST", "/api/sessions", {"source": {"git": str(work)}})
    sid = created["session_id"]
    # An import leaves symlinks out; the user's own (or the shell's) in workdir/ are kept,
    # committed as symlinks (mode 120000) by the next action.
    workdir = srv.session_path(sid) / "workdir"
    os.symlink("main.py", workdir / "src" / "alias.py")
    os.symlink(LINK, workdir / "src" / ".main.py.braid-tmp")
    os.symlink("../src", workdir / "lib" / "up")
    fresh = roots / "fresh"
    status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                          {"to": "folder", "path": str(fresh)})
    assert status == 200, out
    assert "120000" in git(srv.session_path(sid), "ls-tree", "HEAD:workdir/src")
    assert os.readlink(fresh / "src" / "alias.py") == "main.py"  # row 16
    assert os.readlink(fresh / "src" / ".main.py.braid-tmp") == LINK  # data, not followed
    assert os.readlink(fresh / "lib" / "up") == "../src"
    assert files_of(fresh) == {
        "src/main.py": "print('v1')\n", "lib/util.py": "x = 1\n", "lib/up": "-> ../src",
        "src/alias.py": "-> main.py", "src/.main.py.braid-tmp": f"-> {LINK}"}
    assert (tmp_path / "outside" / "victim.txt").read_text() == "victim\n"
    # The same tree as the session's: `git status` in a clone of it sees nothing changed.
    git(fresh, "init", "-q")
    git(fresh, "add", "-A")
    tree = git(fresh, "write-tree").strip()
    assert tree == git(srv.session_path(sid), "rev-parse", "HEAD:workdir").strip()
    # Exported again: nothing to do, and the symlinks stay symlinks.
    status, again = srv.api("POST", f"/api/sessions/{sid}/export",
                            {"to": "folder", "path": str(fresh)})
    assert (again["written"], again["deleted"], again["conflicts"]) == ([], [], []), again
    assert (fresh / "src" / "alias.py").is_symlink()


@pytest.mark.slow
def test_a_file_folder_clash_is_a_conflict_and_nothing_is_written(srv: Server,
                                                                  roots: Path) -> None:
    src = roots / "proj"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    (src / "notes").write_text("notes\n")
    status, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    assert status == 201, created
    sid = created["session_id"]
    srv.run(sid, "write a.txt session a\nwrite docs/readme.md r\nwrite new.txt n\n"
                 "write data.txt d")
    (src / "docs").write_text("the user's file where the session has a folder\n")
    (src / "data.txt").mkdir()  # a folder of the user's where the session has a file
    (src / "data.txt" / "keep.txt").write_text("keep\n")
    before = files_of(src)
    for force in (False, True):  # force never deletes a folder tree nor a file in the way
        status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                              {"to": "folder", "force": force})
        assert status == 409 and out["error"]["code"] == "conflict", out
        assert sorted((c["path"], c["theirs"]) for c in out["error"]["details"][
            "conflicts"]) == [("data.txt", "folder"), ("docs/readme.md", "file")]
        assert files_of(src) == before  # nothing written: not a.txt, not new.txt
        assert not [p for p in src.iterdir() if p.name.startswith(".braid-export")]
    # Cleared by the user: the export goes through, and the socket answers the same way.
    (src / "docs").unlink()
    ws = srv.socket(sid)
    try:
        reply = ws.call("export_session", to="folder")
        assert reply["type"] == "error" and reply["error"]["code"] == "conflict", reply
        (src / "data.txt" / "keep.txt").unlink()
        (src / "data.txt").rmdir()
        reply = ws.call("export_session", to="folder")
        assert reply["type"] == "result", reply
        assert sorted(reply["data"]["written"]) == ["a.txt", "data.txt", "docs/readme.md",
                                                    "new.txt"]
    finally:
        ws.close()
    assert (src / "docs" / "readme.md").read_text() == "r\n"
    assert_fsck(srv.session_path(sid))


@pytest.mark.slow
def test_a_file_becomes_a_folder_and_a_deletion_is_exported(srv: Server, roots: Path) -> None:
    src = roots / "proj"
    src.mkdir()
    (src / "x").write_text("x\n")
    (src / "gone.txt").write_text("gone\n")
    _, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    sid = created["session_id"]
    srv.run(sid, "delete x\nwrite x/y.txt y\ndelete gone.txt")
    status, out = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "folder"})
    assert status == 200, out
    assert (out["written"], out["deleted"]) == (["x/y.txt"], ["gone.txt", "x"])
    assert files_of(src) == {"x/y.txt": "y\n"}


@pytest.mark.parametrize("target", [
    "repo/.git", pytest.param("repo/.git/refs", marks=pytest.mark.slow),
    pytest.param("new/.GIT", marks=pytest.mark.slow),
    pytest.param("new/git~1", marks=pytest.mark.slow),
    pytest.param("new/.git. /x", marks=pytest.mark.slow)])
def test_never_into_a_git_folder(srv: Server, roots: Path, target: str) -> None:
    work = roots / "repo"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    config = (work / ".git" / "config").read_bytes()
    sid = srv.new_session()
    srv.run(sid, "write config [core]\\n\\tfsmonitor = id > owned.txt\nwrite HEAD x")
    status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                          {"to": "folder", "path": str(roots / target), "force": True})
    assert status == 403 and out["error"]["code"] == "forbidden", out
    assert (work / ".git" / "config").read_bytes() == config
    assert not (roots / "new").exists()
