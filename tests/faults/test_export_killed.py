"""The crash matrix of export to a folder (DESIGN §4 "Boundaries", issue 21 row 10): kill -9
at each of its crash points, restart, retry. Start-up recovery finishes an export whose files
were all staged (or drops one that was not); the retry completes it; then the folder holds
exactly the session's files (symlinks as symlinks), no private folder or record is left, the
session is `git fsck` clean, and a second retry is a no-op that says so.

Two exports per point: to a new folder, and an update of a folder exported before (a file
modified, one deleted, a file become a folder, a new one). Then a 3,000-file export killed
half-way through its renames (row 10 had 30,001 files and a retry that wrote nothing).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Server, assert_fsck, free_port, git
from server.base.crash import POINTS
from server.features.sources.exporting import RECORD

GIT_USER = ["-c", "user.name=T", "-c", "user.email=t@x"]


@dataclass
class Template:
    data_dir: Path
    roots: Path
    sid: str  # a session imported from roots/repo, one turn on it after its first export
    big: str  # a session of 3,000 files
    exported: Path  # roots/out as the first export left it (copied back before each case)


def roots_env(roots: Path) -> dict[str, str]:
    return {"BRAID_IMPORT_ROOTS": str(roots)}


def build_template(root: Path) -> Template:
    roots = root / "roots"
    work = roots / "repo"
    (work / "sub").mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    for name, text in {"a.txt": "a\n", "c.txt": "c\n", "x": "x\n", "sub/b.txt": "b\n"}.items():
        (work / name).write_text(text)
    (work / "tool.sh").write_text("#!/bin/sh\n")
    (work / "tool.sh").chmod(0o755)
    git(work, "add", "-A")
    git(work, *GIT_USER, "commit", "-qm", "v1")
    big = roots / "big"
    for i in range(3000):
        d = big / f"d{i // 100:02d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i % 100}.txt").write_text(f"{i}\n")
    srv = Server(data_dir=root / "data", port=free_port(), env=roots_env(roots)).start()
    try:
        status, created = srv.api("POST", "/api/sessions", {"source": {"git": str(work)}})
        assert status == 201, created
        sid = created["session_id"]
        srv.run(sid, "write a.txt session a\nwrite new/n.txt n")
        os.symlink("../a.txt", srv.session_path(sid) / "workdir" / "new" / "link")
        status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                              {"to": "folder", "path": str(roots / "out")})
        assert status == 200 and "new/link" in out["written"], out
        srv.run(sid, "append a.txt more\ndelete c.txt\ndelete x\nwrite x/y.txt y\n"
                     "write sub/b.txt B\nwrite sub/deep/z.txt z")
        status, created = srv.api("POST", "/api/sessions", {"source": {"path": str(big)}})
        assert status == 201, created
        shutil.copytree(roots / "out", root / "out-exported", symlinks=True)
        return Template(srv.data_dir, roots, sid, created["session_id"], root / "out-exported")
    finally:
        srv.stop()


def session_files(repo: Path) -> dict[str, str]:
    """The session's files as `git ls-tree` gives them: path -> mode and blob id."""
    out = git(repo, "ls-tree", "-r", "HEAD:workdir")
    return {line.split("\t")[1]: " ".join(line.split()[:3:2]) for line in out.splitlines()}


def folder_files(folder: Path) -> dict[str, str]:
    """The folder's files the same way (git's blob ids), read without following anything."""
    out: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".braid-export-")]  # see leftovers()
        for name in names + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath) / name
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324
            mode = "120000" if path.is_symlink() else \
                "100755" if path.stat().st_mode & 0o100 else "100644"
            out[str(path.relative_to(folder))] = f"{mode} {blob}"
    return out


def leftovers(folder: Path, repo: Path) -> list[str]:
    found = [str(p) for p in folder.rglob("*") if ".braid" in p.name]
    return found + ([RECORD] if (repo / ".git" / RECORD).exists() else [])


def crash_at(data_dir: Path, roots: Path, point: str, sid: str, folder: Path) -> None:
    srv = Server(data_dir=data_dir, port=free_port(),
                 env={**roots_env(roots), "BRAID_CRASH_AT": point})
    srv.start()
    ws = srv.socket(sid)
    ws.send("export_session", to="folder", path=str(folder))
    try:
        while True:
            ws.next(timeout=60)
    except Exception:  # noqa: BLE001 - the socket dies with the server
        pass
    assert srv.proc is not None
    assert srv.proc.wait(timeout=60) == -signal.SIGKILL, f"{point} was never reached"


def kill_when_begun(data_dir: Path, roots: Path, point: str, sid: str, folder: Path) -> None:
    """kill -9 as row 10 did: no crash point, the moment the export shows in the folder."""
    srv = Server(data_dir=data_dir, port=free_port(), env=roots_env(roots)).start()

    def post() -> None:
        try:
            srv.api("POST", f"/api/sessions/{sid}/export", {"to": "folder", "path": str(folder)})
        except OSError:  # the server dies under it: that is the point
            pass

    threading.Thread(target=post, daemon=True).start()
    deadline = time.monotonic() + 30
    while not (folder.exists() and any(folder.iterdir())):
        assert time.monotonic() < deadline, "the export never started"
        time.sleep(0.002)
    srv.stop(signal.SIGKILL)


def run_case(t: Template, sid: str, folder: Path, point: str, work: Path,
             kill: Callable[[Path, Path, str, str, Path], None] = crash_at) -> str:
    """Kill at `point`, restart, check, retry twice. Returns what the restart left."""
    data_dir = work / "data"
    work.mkdir(parents=True)
    shutil.copytree(t.data_dir, data_dir, symlinks=True)
    for f in (t.roots / "out", t.roots / "new"):
        shutil.rmtree(f, ignore_errors=True)
    shutil.copytree(t.exported, t.roots / "out", symlinks=True)
    before = folder_files(folder) if folder.exists() else {}
    repo = data_dir / "sessions" / sid
    kill(data_dir, t.roots, point, sid, folder)
    half = folder_files(folder)
    srv = Server(data_dir=data_dir, port=free_port(), env=roots_env(t.roots)).start()
    try:
        want = session_files(repo)
        after_start = folder_files(folder)
        assert after_start in (before, want), "start-up left the export half done"
        assert not leftovers(folder, repo), leftovers(folder, repo)
        status, retry = srv.api("POST", f"/api/sessions/{sid}/export",
                                {"to": "folder", "path": str(folder)})
        assert status == 200 and retry["conflicts"] == [], retry
        assert folder_files(folder) == want
        assert not leftovers(folder, repo), leftovers(folder, repo)
        if after_start == before:  # the retry did it all and says so
            assert retry["written"], retry
        status, again = srv.api("POST", f"/api/sessions/{sid}/export",
                                {"to": "folder", "path": str(folder)})
        assert status == 200, again
        assert (again["written"], again["deleted"], again["conflicts"]) == ([], [], []), again
        assert folder_files(folder) == want
        assert_fsck(repo)
        assert git(repo, "status", "--porcelain") == ""
        moved = "half" if half not in (before, want) else "none" if half == before else "all"
        return f"renamed at the kill: {moved}; " + \
            ("finished at start-up" if after_start == want else "redone by the retry")
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return build_template(tmp_path_factory.mktemp("export-killed"))


def cases() -> Iterator[tuple[str, str]]:
    for point in POINTS["export"]:
        for target in ("new", "out"):
            yield point, target


def test_kill_at_every_point_of_an_export(template: Template, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rows: list[tuple[str, str, str]] = []
    failures: list[str] = []
    for n, (point, target) in enumerate(cases()):
        try:
            outcome = run_case(template, template.sid, template.roots / target, point,
                               tmp_path / f"case{n}")
            rows.append((point, target, f"ok ({outcome})"))
        except (AssertionError, RuntimeError, subprocess.SubprocessError) as e:
            rows.append((point, target, "FAIL"))
            failures.append(f"{target} @ {point}: {e}")
    with capsys.disabled():
        print("\n\nkill -9 during an export to a folder, restart, retry (invariants checked)")
        print(f"{'crash point':<26} {'folder':<7} result")
        for point, target, result in rows:
            print(f"{point:<26} {target:<7} {result}")
        print()
    assert not failures, "\n".join(failures)


def test_a_big_export_killed_mid_rename_is_completed(template: Template,
                                                     tmp_path: Path) -> None:
    folder = template.roots / "new"
    outcome = run_case(template, template.big, folder, "export.mid_rename", tmp_path / "big")
    assert outcome.startswith("renamed at the kill: half"), outcome
    assert len(list(folder.rglob("*.txt"))) == 3000


def test_a_big_export_killed_without_a_crash_point_is_completed(template: Template,
                                                               tmp_path: Path) -> None:
    """Row 10 as found: the retry answered written=0 and left the folder half full."""
    folder = template.roots / "new"
    run_case(template, template.big, folder, "-", tmp_path / "big", kill=kill_when_begun)
    assert len(list(folder.rglob("*.txt"))) == 3000
