"""The crash matrix for import and update from source (issue 21): kill -9 at each named point
(server/base/crash.py POINTS["import"], POINTS["update"]), restart, and check that nothing is
half done: no half session folder (nor its marker) is left or listed, a kept session is whole
(fsck, status clean, its import commit and source base); an update is one commit or none,
`workdir/` matching HEAD; and a retry completes the operation."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, free_port, git
from server.base.crash import POINTS


def armed(data_dir: Path, env: dict[str, str], point: str) -> Server:
    return Server(data_dir=data_dir, port=free_port(),
                  env={**env, "BRAID_CRASH_AT": point}).start()


def killed_by(srv: Server, method: str, path: str, body: Any) -> None:
    try:
        status, answer = srv.api(method, path, body)
        raise AssertionError(f"answered {status} {answer}: the crash point was never reached")
    except OSError:  # the server died under the request: that is the point
        pass
    assert srv.proc is not None and srv.proc.wait(timeout=30) == -signal.SIGKILL


def project(root: Path) -> Path:
    src = root / "home" / "project"
    (src / "pkg").mkdir(parents=True)
    for i in range(30):
        (src / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    (src / "README.md").write_text("# project\n")
    return src


def check_whole(repo: Path) -> None:
    assert_fsck(repo)
    assert git(repo, "status", "--porcelain") == ""
    kinds = git(repo, "log", "--format=%(trailers:key=Braid-Kind,valueonly)").split()
    assert kinds[-1] == "import", kinds
    assert git(repo, "rev-parse", "--verify", "-q", "refs/braid/source-base").strip()


def listed_and_on_disk(srv: Server) -> set[str]:
    sessions = srv.data_dir / "sessions"
    on_disk = {p.name for p in sessions.iterdir()}
    listed = {s["session_id"] for s in srv.api("GET", "/api/sessions")[1]["sessions"]}
    assert on_disk == listed, (on_disk, listed)  # no half folder, no marker, nothing hidden
    for sid in listed:
        check_whole(sessions / sid)
    return listed


@pytest.mark.parametrize("point", POINTS["import"])
def test_an_import_killed_at_each_point(tmp_path: Path, point: str) -> None:
    src = project(tmp_path)
    env = {"BRAID_IMPORT_ROOTS": str(tmp_path / "home")}
    data = tmp_path / "data"
    killed_by(armed(data, env, point), "POST", "/api/sessions", {"source": {"path": str(src)}})
    srv = Server(data_dir=data, port=free_port(), env=env).start()
    try:
        kept = listed_and_on_disk(srv)
        assert len(kept) <= 1
        outcome = "done" if kept else "undone"
        status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
        assert status == 201 and body["import"]["files"] == 31, body
        assert listed_and_on_disk(srv) == kept | {body["session_id"]}
        for sid in kept | {body["session_id"]}:
            workdir = srv.session_path(sid) / "workdir"
            assert (workdir / "pkg" / "m29.py").read_text() == "x = 29\n"
            assert srv.run(sid, "write note.txt hi")["status"] == "COMPLETED"
            check_whole(srv.session_path(sid))
    finally:
        srv.stop()
    print(f"import killed at {point}: {outcome}")
    if point in ("import.after_files", "import.after_commit", "import.after_meta"):
        assert outcome == "undone"  # no session.json, or no index yet: not a session


@pytest.mark.parametrize("point", POINTS["update"])
def test_an_update_killed_at_each_point(tmp_path: Path, point: str) -> None:
    root = tmp_path
    src = project(root)
    env = {"BRAID_IMPORT_ROOTS": str(root / "home")}
    srv = Server(data_dir=root / "data", port=free_port(), env=env).start()
    try:
        status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
        assert status == 201, body
        sid = body["session_id"]
    finally:
        srv.stop()
    (src / "README.md").write_text("# project, moved on\n")
    (src / "pkg" / "m0.py").unlink()
    (src / "pkg" / "new.py").write_text("y = 1\n")
    repo = root / "data" / "sessions" / sid
    tip = git(repo, "rev-parse", "HEAD").strip()
    killed_by(armed(root / "data", env, point), "POST",
              f"/api/sessions/{sid}/update_from_source", {})
    srv = Server(data_dir=root / "data", port=free_port(), env=env).start()
    try:
        assert_fsck(repo)
        assert git(repo, "status", "--porcelain") == ""  # workdir/ matches HEAD
        head = git(repo, "rev-parse", "HEAD").strip()
        if head == tip:
            outcome = "undone"
            assert (repo / "workdir" / "pkg" / "m0.py").exists()
            assert not (repo / "workdir" / "pkg" / "new.py").exists()
        else:
            outcome = "done"
            assert git(repo, "rev-parse", "HEAD~1").strip() == tip  # one commit, whole
            changed = set(git(repo, "diff", "--name-only", tip, "HEAD").split())
            assert changed - {"session.json"} == {
                "workdir/README.md", "workdir/pkg/m0.py", "workdir/pkg/new.py"}, changed
        status, body = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
        assert status == 200, body
        assert (repo / "workdir" / "README.md").read_text() == "# project, moved on\n"
        assert (repo / "workdir" / "pkg" / "new.py").read_text() == "y = 1\n"
        assert not (repo / "workdir" / "pkg" / "m0.py").exists()
        assert git(repo, "status", "--porcelain") == ""
        base = git(repo, "rev-parse", "refs/braid/source-base^{tree}").strip()
        assert base == git(repo, "rev-parse", "HEAD:workdir").strip()
        status, again = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
        assert status == 200 and again["updated_paths"] == [], again
        assert srv.run(sid, "write note.txt hi")["status"] == "COMPLETED"
        assert_fsck(repo)
    finally:
        srv.stop()
    print(f"update killed at {point}: {outcome}")
    if point == "update.after_snapshot":
        assert outcome == "undone"
    if point in ("user-edit.after_commit", "update.after_commit"):
        assert outcome == "done"
