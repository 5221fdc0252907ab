"""Issue 21, rows 9 and 15 (and the upload half of 3 and 5), against a real server: an upload's
names are refused at the door with nothing written; its size is counted as it arrives
(`too_large`, nothing kept); its body is streamed, so the server's memory does not follow its
size, nor does a `workdir.zip`'s; an error answer leaves the keep-alive connection usable."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, git, multipart

MB = 1024 * 1024


def post(conn: http.client.HTTPConnection, srv: Server, sid: str, body: Any, ctype: str,
         length: int | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": ctype}
    if length is not None:
        headers["Content-Length"] = str(length)
    conn.request("POST", f"/api/sessions/{sid}/files", body=body, headers=headers)
    res = conn.getresponse()
    return res.status, json.loads(res.read() or b"null")


def upload(srv: Server, sid: str, files: list[tuple[str, bytes]], folder: str = ""
           ) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    try:
        return post(conn, srv, sid, *multipart(files, folder))
    finally:
        conn.close()


def nothing_written(srv: Server, sid: str, head: str) -> None:
    repo = srv.session_path(sid)
    assert git(repo, "rev-parse", "HEAD").strip() == head.strip()
    assert list((repo / "workdir").iterdir()) == []
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    staging = repo / ".git" / "braid-uploads"
    assert not staging.exists() or list(staging.iterdir()) == []
    assert_fsck(repo)


BAD_NAMES = [(".GIT/config", ""), (".Git", ""), ("a/.Git/config", ""), (".git /x", ""),
             ("sub/.git", ""), ("git~1/x", ""), ("x" * 300, ""), ("ok.txt", ".Git"),
             ("ok.txt", "a/.git "), ("c" * 200, "d" * 300)]


@pytest.mark.parametrize("name,folder", BAD_NAMES)
def test_a_name_git_cannot_hold_is_refused_with_nothing_written(shared_server: Server,
                                                               name: str,
                                                               folder: str) -> None:
    sid = shared_server.new_session()
    head = git(shared_server.session_path(sid), "rev-parse", "HEAD")
    # A good file first: it must not stay either.
    status, body = upload(shared_server, sid, [("good.txt", b"good"), (name, b"x")], folder)
    assert status == 400 and body["error"]["code"] == "bad_request", body
    nothing_written(shared_server, sid, head)
    # The session goes on: the next upload works.
    status, body = upload(shared_server, sid, [("good.txt", b"good")])
    assert status == 201, body


def test_a_file_and_a_folder_of_one_name_is_refused(shared_server: Server) -> None:
    sid = shared_server.new_session()
    head = git(shared_server.session_path(sid), "rev-parse", "HEAD")
    status, body = upload(shared_server, sid, [("a", b"file"), ("a/b.txt", b"in a folder")])
    assert status == 400 and body["error"]["code"] == "bad_request", body
    nothing_written(shared_server, sid, head)


def test_too_many_bytes_or_files_is_too_large_and_nothing_is_kept(server_factory: Any) -> None:
    srv = server_factory(BRAID_IMPORT_MAX_BYTES=str(MB), BRAID_IMPORT_MAX_FILES="3")
    sid = srv.new_session()
    head = git(srv.session_path(sid), "rev-parse", "HEAD")
    status, body = upload(srv, sid, [("a.bin", b"a" * (MB // 2)), ("b.bin", b"b" * MB)])
    assert status == 413 and body["error"]["code"] == "too_large", body
    nothing_written(srv, sid, head)
    status, body = upload(srv, sid, [(f"f{i}.txt", b"x") for i in range(4)])
    assert status == 413 and body["error"]["code"] == "too_large", body
    nothing_written(srv, sid, head)
    status, body = upload(srv, sid, [(f"f{i}.txt", b"x") for i in range(3)])
    assert status == 201 and len(body["paths"]) == 3, body


def test_an_error_answer_keeps_the_connection(server_factory: Any) -> None:
    srv = server_factory(BRAID_IMPORT_MAX_BYTES=str(MB))
    sid = srv.new_session()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        for files in ([(".GIT/config", b"[core]\n")], [("x" * 300, b"x")],
                      [("big.bin", b"z" * (3 * MB))], [("sub/.git", b"gitdir: /x\n")]):
            status, body = post(conn, srv, sid, *multipart(files))
            assert status in (400, 413), body
            # The same connection answers the next request.
            conn.request("GET", f"/api/sessions/{sid}",
                         headers={"Authorization": f"Bearer {srv.token}"})
            res = conn.getresponse()
            assert res.status == 200, res.read()
            res.read()
        status, body = post(conn, srv, sid, *multipart([("ok.txt", b"ok")]))
        assert status == 201, body
    finally:
        conn.close()
    assert not (srv.session_path(sid) / "workdir" / "sub").exists()


# -- memory ----------------------------------------------------------------------------------


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def streamed_body(boundary: str, name: str, size: int) -> Iterator[bytes]:
    yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; "
           f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    block = os.urandom(MB)
    for _ in range(size // MB):
        yield block
    yield f"\r\n--{boundary}--\r\n".encode()


@pytest.mark.slow
def test_a_big_upload_and_its_zip_do_not_grow_the_server(server_factory: Any) -> None:
    srv = server_factory()
    assert srv.proc is not None
    pid = srv.proc.pid
    sid = srv.new_session()
    srv.run(sid, "write a.txt one")  # the server warmed up: what grows next is the upload's
    before = memory(pid)["VmRSS"]
    boundary = uuid.uuid4().hex
    size = 200 * MB
    head_len = len(next(streamed_body(boundary, "big.bin", 0)))
    length = head_len + size + len(f"\r\n--{boundary}--\r\n")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    try:
        status, body = post(conn, srv, sid, streamed_body(boundary, "big.bin", size),
                            f"multipart/form-data; boundary={boundary}", length)
    finally:
        conn.close()
    grown = memory(pid)["VmHWM"] - before  # whatever the answer: a refusal counts too
    assert grown < 60 * MB, f"the server grew by {grown // MB} MB for a 200 MB upload"
    assert status == 201, body
    repo = srv.session_path(sid)
    assert (repo / "workdir" / "big.bin").stat().st_size == size
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "cat-file", "-s", "HEAD:workdir/big.bin").strip() == str(size)

    # Its zip: streamed, the lane free meanwhile.
    before = memory(pid)["VmRSS"]
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    try:
        conn.request("GET", f"/api/sessions/{sid}/workdir.zip",
                     headers={"Authorization": f"Bearer {srv.token}"})
        res = conn.getresponse()
        assert res.status == 200
        first = res.read(1 << 16)
        # While the download is under way, the session answers.
        status, info = srv.api("GET", f"/api/sessions/{sid}")
        assert status == 200, info
        got = first + res.read()
    finally:
        conn.close()
    grown = memory(pid)["VmHWM"] - before
    with zipfile.ZipFile(io.BytesIO(got)) as zf:
        assert sorted(zf.namelist()) == ["a.txt", "big.bin"]
        assert zf.getinfo("big.bin").file_size == size
        assert zf.testzip() is None
    assert grown < 60 * MB, f"the server grew by {grown // MB} MB for the zip"

    # The folder's listing and the file itself: sizes from object headers, bytes streamed.
    before = memory(pid)["VmRSS"]
    status, listing = srv.api("GET", f"/api/sessions/{sid}/files?path=")
    assert status == 200
    assert {e["path"]: e["size"] for e in listing["entries"]}["big.bin"] == size
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    try:
        conn.request("GET", f"/api/sessions/{sid}/files?path=big.bin",
                     headers={"Authorization": f"Bearer {srv.token}"})
        res = conn.getresponse()
        assert res.status == 200 and res.headers["content-security-policy"].startswith("sandbox")
        digest = hashlib.sha1(f"blob {size}\0".encode())
        while chunk := res.read(MB):
            digest.update(chunk)
    finally:
        conn.close()
    assert digest.hexdigest() == git(repo, "rev-parse", "HEAD:workdir/big.bin").strip()
    grown = memory(pid)["VmHWM"] - before
    assert grown < 60 * MB, f"the server grew by {grown // MB} MB to list and send the file"


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads")


def children(pid: int) -> list[str]:
    """The processes any thread of `pid` started (each thread lists its own)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += (task / "children").read_text().split()
        except OSError:
            pass
    return out


@pytest.mark.slow
def test_a_zip_left_half_read_ends_its_thread_and_git(server_factory: Any) -> None:
    srv = server_factory()
    assert srv.proc is not None
    sid = srv.new_session()
    boundary = uuid.uuid4().hex
    size = 40 * MB
    length = len(next(streamed_body(boundary, "big.bin", 0))) + size + \
        len(f"\r\n--{boundary}--\r\n")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    status, body = post(conn, srv, sid, streamed_body(boundary, "big.bin", size),
                        f"multipart/form-data; boundary={boundary}", length)
    conn.close()
    assert status == 201, body
    srv.api("GET", f"/api/sessions/{sid}")
    idle = threads(srv.proc.pid)
    for _ in range(3):  # the client reads a little, then goes away
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request("GET", f"/api/sessions/{sid}/workdir.zip",
                     headers={"Authorization": f"Bearer {srv.token}"})
        res = conn.getresponse()
        assert res.status == 200 and len(res.read(1 << 16)) == 1 << 16
        conn.sock.shutdown(2)
        conn.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if threads(srv.proc.pid) <= idle and not children(srv.proc.pid):
            break
        time.sleep(0.2)
    assert threads(srv.proc.pid) <= idle, "a zip thread outlived its client"
    assert not children(srv.proc.pid), "a git cat-file outlived its client"
    status, _ = srv.api("GET", f"/api/sessions/{sid}")
    assert status == 200
