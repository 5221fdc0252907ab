"""Issue 21, row 11: kill -9 at each crash point of an upload (crash.POINTS["upload"]), restart,
and check that the upload is whole or absent: `workdir/` and HEAD hold all of its files (one
`user-edit` commit) or none of them (the file it overwrote back as it was), `git status`
clean, `git fsck` clean, no staging folder, intent record or temporary file left, and a retry
of the same upload works. The table is printed at the end, as test_crash_matrix.py does."""

from __future__ import annotations

import http.client
import shutil
import signal
from pathlib import Path

import pytest

from conftest import Server, assert_fsck, free_port, git
from server.base.crash import POINTS
from tests.faults.test_upload_boundaries import multipart

FILES = [("over.txt", b"uploaded\n"), ("new.txt", b"new\n"), ("sub/deep/a.bin", b"\0" * 70000),
         ("sub/b.txt", b"b\n")]


def build_template(root: Path) -> tuple[Path, str]:
    root.mkdir(parents=True)
    srv = Server(data_dir=root / "data", port=free_port()).start()
    try:
        sid = srv.new_session()
        srv.run(sid, "write over.txt before\nwrite keep.txt kept")
        return srv.data_dir, sid
    finally:
        srv.stop()


def send_upload(srv: Server, sid: str) -> tuple[int, dict]:
    import json

    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        body, ctype = multipart(FILES)
        conn.request("POST", f"/api/sessions/{sid}/files", body=body,
                     headers={"Authorization": f"Bearer {srv.token}", "Content-Type": ctype})
        res = conn.getresponse()
        return res.status, json.loads(res.read() or b"null")
    finally:
        conn.close()


def check(repo: Path, tip: str) -> str:
    assert_fsck(repo)
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert not (repo / ".git" / "braid-uploads").exists() or \
        not any((repo / ".git" / "braid-uploads").iterdir())
    assert not (repo / ".git" / "braid-intent.json").exists()
    work = repo / "workdir"
    assert not [p for p in work.rglob("*") if ".~braid-" in p.name]
    assert (work / "keep.txt").read_text() == "kept\n"
    head = git(repo, "rev-parse", "HEAD").strip()
    if head == tip:
        assert (work / "over.txt").read_text() == "before\n"
        assert not (work / "new.txt").exists() and not (work / "sub").exists()
        return "undone"
    assert git(repo, "rev-parse", "HEAD~1").strip() == tip
    kind = git(repo, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)").strip()
    assert kind == "user-edit"
    for name, data in FILES:
        assert (work / name).read_bytes() == data
        assert git(repo, "cat-file", "-s", f"HEAD:workdir/{name}").strip() == str(len(data))
    return "done"


def run_case(data_template: Path, sid: str, point: str, work: Path) -> str:
    data_dir = work / "data"
    work.mkdir(parents=True)
    shutil.copytree(data_template, data_dir, symlinks=True)
    repo = data_dir / "sessions" / sid
    tip = git(repo, "rev-parse", "HEAD").strip()
    armed = Server(data_dir=data_dir, port=free_port(), env={"BRAID_CRASH_AT": point}).start()
    with pytest.raises((OSError, http.client.HTTPException)):
        send_upload(armed, sid)
    assert armed.proc is not None
    assert armed.proc.wait(timeout=30) == -signal.SIGKILL, f"{point} was never reached"
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        outcome = check(repo, tip)
        status, body = send_upload(srv, sid)  # a retry works, whatever the kill left
        assert status == 201, body
        check(repo, git(repo, "rev-parse", "HEAD~1").strip())
        run = srv.run(sid, "write z.txt zed")
        assert run["status"] == "COMPLETED"
        assert git(repo, "status", "--porcelain") == ""
        return outcome
    finally:
        srv.stop()


def test_kill_at_every_point_of_an_upload(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data, sid = build_template(tmp_path / "template")
    rows: list[tuple[str, str]] = []
    failures: list[str] = []
    for n, point in enumerate(POINTS["upload"]):
        try:
            rows.append((point, f"ok ({run_case(data, sid, point, tmp_path / f'case{n}')})"))
        except (AssertionError, RuntimeError, OSError) as e:
            rows.append((point, "FAIL"))
            failures.append(f"{point}: {e}")
    with capsys.disabled():
        print("\n\nkill -9 at each crash point of an upload, then restart")
        for point, result in rows:
            print(f"upload       {point:<28} {result}")
        print()
    assert not failures, "\n".join(failures)
