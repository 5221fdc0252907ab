"""The file panel's protocol against a real server: `list_files`, GET files (entries or bytes),
workdir.zip (checked against `git archive`), uploads as revertable `user-edit` commits confined
to workdir/; checked with the git CLI."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import urllib.error
import urllib.request
import zipfile
from typing import Any

import pytest

from conftest import Server, git, upload


def get(server: Server, path: str) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(f"{server.base_url}{path}")
    req.add_header("Authorization", f"Bearer {server.token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read(), dict(res.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def archive(path: Any, rev: str) -> dict[str, bytes]:
    out = subprocess.run(["git", "-C", str(path), "archive", "--format=tar", f"{rev}:workdir"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                if m.isfile()}


@pytest.mark.slow
def test_listing_and_bytes_at_head_and_at_a_commit(shared_server: Server) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "write src/app.py print(1)\nwrite README.md hello")
    shared_server.run(sid, "write src/app.py print(2)\nwrite src/util/x.txt x")
    path = shared_server.session_path(sid)
    old = git(path, "log", "--format=%H", "--grep", f"Braid-Run: {first['run_id']}", "-1").strip()

    status, body = shared_server.api("GET", f"/api/sessions/{sid}/files")
    assert status == 200
    assert body["entries"] == [{"path": "src", "type": "dir", "size": None},
                               {"path": "README.md", "type": "file", "size": 6}]
    _, body = shared_server.api("GET", f"/api/sessions/{sid}/files?path=src")
    assert [e["path"] for e in body["entries"]] == ["src/util", "src/app.py"]
    status, data, headers = get(shared_server, f"/api/sessions/{sid}/files?path=src/app.py")
    assert status == 200 and data == b"print(2)\n"
    assert headers["content-type"] == "application/octet-stream"
    assert "attachment" in headers["content-disposition"]
    # At the first turn's commit: the file as it was, and no util/ yet.
    _, data, _ = get(shared_server, f"/api/sessions/{sid}/files?path=src/app.py&ref={old}")
    assert data == b"print(1)\n"
    _, body = shared_server.api("GET", f"/api/sessions/{sid}/files?path=src&ref={old[:12]}")
    assert [e["path"] for e in body["entries"]] == ["src/app.py"]
    _, body = shared_server.api("GET", f"/api/sessions/{sid}/files?ref=main")
    assert body["ref"] == "main" and body["commit_id"] == git(path, "rev-parse", "main").strip()

    ws = shared_server.socket(sid)
    try:
        reply = ws.call("list_files", path="src", ref=old)
        assert reply["type"] == "result"
        assert [e["path"] for e in reply["data"]["entries"]] == ["src/app.py"]
        assert ws.call("list_files", path="../etc")["error"]["code"] == "forbidden"
        assert ws.call("list_files", path=5)["error"]["code"] == "bad_request"
        assert ws.call("list_files", ref=["x"])["error"]["code"] == "bad_request"
        assert ws.call("list_files", ref="nope")["error"]["code"] == "not_found"
        assert ws.call("list_files", path="README.md")["error"]["code"] == "bad_request"
    finally:
        ws.close()


@pytest.mark.parametrize("query,status", [
    ("path=../session.json", 403), ("path=/etc/passwd", 403), ("path=a/../../x", 403),
    ("path=.git/config", 403), ("path=nothere.txt", 404), ("ref=-x", 400),
    ("ref=HEAD~1", 400), ("ref=0000000000000000000000000000000000000000", 404),
    ("path=a%00b", 400),
])
def test_bad_paths_and_refs(shared_server: Server, query: str, status: int) -> None:
    sid = shared_server.new_session()
    got, body, _ = get(shared_server, f"/api/sessions/{sid}/files?{query}")
    assert got == status, body
    assert json.loads(body)["error"]["code"]


def test_workdir_zip_matches_git_archive(shared_server: Server) -> None:
    sid = shared_server.new_session()
    first = shared_server.run(sid, "write a.txt one\nwrite deep/er/b.py x = 1")
    shared_server.run(sid, "write a.txt two\ndelete deep/er/b.py\nwrite c.md see")
    path = shared_server.session_path(sid)
    old = git(path, "log", "--format=%H", "--grep", f"Braid-Run: {first['run_id']}", "-1").strip()
    for ref, rev in (("", "HEAD"), (f"?ref={old}", old)):
        status, data, headers = get(shared_server, f"/api/sessions/{sid}/workdir.zip{ref}")
        assert status == 200 and headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            got = {n: zf.read(n) for n in zf.namelist()}
        assert got == archive(path, rev)
    assert set(got) == {"a.txt", "deep/er/b.py"}


def test_an_upload_is_one_revertable_user_edit(shared_server: Server, other_token: str) -> None:
    sid = shared_server.new_session()
    shared_server.run(sid, "write keep.txt keep")
    path = shared_server.session_path(sid)
    before = git(path, "rev-parse", "HEAD").strip()
    status, made = upload(shared_server, sid, [("notes.md", b"# notes\n"),
                                                ("data.bin", bytes(range(256)))], "in")
    assert status == 201, made
    assert made["paths"] == ["in/data.bin", "in/notes.md"]
    assert git(path, "rev-parse", "HEAD^").strip() == before  # exactly one commit
    message = git(path, "log", "-1", "--format=%B")
    assert "Braid-Kind: user-edit" in message and f"Braid-Run: {made['run_id']}" in message
    assert git(path, "show", "HEAD:workdir/in/notes.md") == "# notes\n"
    assert (path / "workdir/in/data.bin").read_bytes() == bytes(range(256))
    assert git(path, "status", "--porcelain") == ""
    # The transcript shows it as a turn with its files; revert takes them out, redo back.
    status, files = shared_server.api("GET",
                                      f"/api/turns/{made['run_id']}/files?session_id={sid}")
    assert status == 200 and {f["path"] for f in files["paths"]} == {"in/data.bin",
                                                                     "in/notes.md"}
    status, body = shared_server.api("POST", f"/api/turns/{made['run_id']}/revert",
                                     {"session_id": sid})
    assert status == 200, body
    assert not (path / "workdir/in/notes.md").exists()
    assert (path / "workdir/keep.txt").read_text() == "keep\n"
    status, body = shared_server.api("POST", f"/api/turns/{made['run_id']}/unrevert",
                                     {"session_id": sid})
    assert status == 200, body
    assert (path / "workdir/in/notes.md").read_text() == "# notes\n"
    # The model is told of the upload in the next turn.
    run = shared_server.run(sid, "recall")
    assert "I uploaded 2 files" in run["messages"][-1]["content"]
    # Another user cannot upload into it.
    status, body = upload(shared_server, sid, [("x.txt", b"x")], token=other_token)
    assert status == 404


@pytest.mark.parametrize("name,folder,code", [
    ("../evil.txt", "", "forbidden"), ("ok.txt", "../up", "forbidden"),
    ("/abs.txt", "", "forbidden"), ("a\\b.txt", "", "bad_request"),
    (".git/hooks/x", "", "forbidden"),
])
def test_uploads_stay_inside_the_workdir(shared_server: Server, name: str, folder: str,
                                         code: str) -> None:
    sid = shared_server.new_session()
    head = git(shared_server.session_path(sid), "rev-parse", "HEAD")
    status, body = upload(shared_server, sid, [(name, b"x")], folder)
    assert status in (400, 403) and body["error"]["code"] == code, body
    assert git(shared_server.session_path(sid), "rev-parse", "HEAD") == head


def test_an_upload_never_follows_a_symlinked_folder(shared_server: Server,
                                                    tmp_path: Any) -> None:
    sid = shared_server.new_session()
    outside = tmp_path / "outside"
    outside.mkdir()
    (shared_server.session_path(sid) / "workdir" / "link").symlink_to(outside)
    status, body = upload(shared_server, sid, [("link/x.txt", b"x")])
    assert status == 403 and body["error"]["code"] == "forbidden", body
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_an_upload_waits_for_no_run(shared_server: Server) -> None:
    sid = shared_server.new_session()
    ws = shared_server.socket(sid)
    try:
        ws.call("send_message", text="slow 100\nsay a b c d e f g h i j")
        ws.event("message_delta")
        status, body = upload(shared_server, sid, [("x.txt", b"x")])
        assert status == 409 and body["error"]["code"] == "busy"
        ws.event("run_completed")
    finally:
        ws.close()
