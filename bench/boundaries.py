"""Server memory at the boundaries (DESIGN §4 "Boundaries", issue 21 row 9): the peak RSS growth
of a real `braid serve` process on 127.0.0.1 during

- a 300 MB upload (one file, streamed by the client with a Content-Length),
- a 500 MB `workdir.zip` download (of a workdir of 300 + 200 MB), while another request on
  the same session is timed (the zip must not hold the session's lane),
- a tree-bomb import: a small git repository whose tree names the same subtree again and
  again (`--levels` × `--fanout`, one blob of `--blob-kb` at the leaves), imported from its
  local path (`POST /api/sessions` with `source: {git: path}`) by a server with
  BRAID_IMPORT_MAX_BYTES=`--import-max-mb` (an import past it is refused: 413 too_large).

Each must grow the server by less than 100 MB. Growth is the peak VmRSS (sampled every 20 ms,
and the kernel's VmHWM after resetting it through /proc/<pid>/clear_refs) minus the RSS
before the step.

    .venv/bin/python bench/boundaries.py
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token-0123456789"
MB = 1024 * 1024
LIMIT = 100 * MB


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_of(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


class Server:
    def __init__(self, work: Path, **env: str) -> None:
        self.port = free_port()
        self.data = work / f"data-{self.port}"
        full = {**os.environ, "PYTHONMALLOC": "malloc",
               "BRAID_SERVER_MALLOC": "1",  # scripts/run's allocator
               "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo", **env}
        self.log = open(work / f"server-{self.port}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--data-dir", str(self.data)], cwd=ROOT, env=full,
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the server did not start")

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = self.conn()
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Authorization": f"Bearer {TOKEN}",
                                  "Content-Type": "application/json"})
            res = conn.getresponse()
            return res.status, json.loads(res.read() or b"null")
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def measured(pid: int, step: Callable[[], str]) -> tuple[int, str, float]:
    """(peak growth in bytes, what the step says, seconds) of the server during `step`."""
    before = status_of(pid)["VmRSS"]
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:
        pass
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, status_of(pid)["VmRSS"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        said = step()
    finally:
        done.set()
        sampler.join()
    took = time.perf_counter() - started
    peak = max(peak, status_of(pid)["VmHWM"])
    return peak - before, said, took


def upload_body(boundary: str, name: str, size: int) -> tuple[Iterator[bytes], int]:
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; "
            f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def chunks() -> Iterator[bytes]:
        yield head
        block = os.urandom(MB)  # incompressible, like most big files people upload
        for _ in range(size // MB):
            yield block
        yield tail

    return chunks(), len(head) + size + len(tail)


def upload(srv: Server, sid: str, name: str, size: int) -> str:
    boundary = uuid.uuid4().hex
    body, length = upload_body(boundary, name, size)
    conn = srv.conn()
    try:
        conn.request("POST", f"/api/sessions/{sid}/files", body=body, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Length": str(length),
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
        res = conn.getresponse()
        got = json.loads(res.read() or b"null")
    finally:
        conn.close()
    return f"HTTP {res.status}" + ("" if res.status == 201 else f" {got['error']['code']}")


def download_zip(srv: Server, sid: str) -> str:
    conn = srv.conn()
    size = 0
    lane = float("nan")
    try:
        conn.request("GET", f"/api/sessions/{sid}/workdir.zip",
                     headers={"Authorization": f"Bearer {TOKEN}"})
        res = conn.getresponse()
        size += len(res.read(MB))
        started = time.perf_counter()  # the session answers during the download
        status, _ = srv.api("GET", f"/api/sessions/{sid}/files?path=")
        lane = time.perf_counter() - started
        while chunk := res.read(MB):
            size += len(chunk)
    finally:
        conn.close()
    return f"HTTP {res.status}, {size / MB:.0f} MB zip; files listed in {lane * 1000:.0f} ms " \
           f"during it (HTTP {status})"


def make_bomb(path: Path, levels: int, fanout: int, blob_kb: int) -> tuple[int, int]:
    """A repository whose tree holds the same subtree `fanout` times per level: fanout^levels
    files of one blob. Returns (files, bytes) it expands to."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}

    def git(*args: str, data: bytes | None = None) -> str:
        return subprocess.run(["git", "-C", str(path), *args], input=data, env=env,
                              capture_output=True, check=True).stdout.decode().strip()

    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    blob = git("hash-object", "-w", "--stdin", data=os.urandom(blob_kb * 1024))
    entries = "".join(f"100644 blob {blob}\tf{i}.bin\n" for i in range(fanout))
    tree = git("mktree", data=entries.encode())
    for _ in range(levels - 1):
        entries = "".join(f"040000 tree {tree}\td{i}\n" for i in range(fanout))
        tree = git("mktree", data=entries.encode())
    commit = git("commit-tree", tree, "-m", "bomb")
    git("update-ref", "refs/heads/main", commit)
    files = fanout ** levels
    return files, files * blob_kb * 1024


def import_bomb(srv: Server, repo: Path, expands: tuple[int, int]) -> str:
    status, body = srv.api("POST", "/api/sessions", {"source": {"git": str(repo)}})
    code = "" if status == 201 else f" {body['error']['code']}"
    written = ""
    if status == 201:
        sid = body["session_id"]
        out = subprocess.run(["du", "-sm", str(srv.data / "sessions" / sid / "workdir")],
                             capture_output=True, text=True).stdout.split()
        written = f", {out[0] if out else '?'} MB written into workdir/"
    return (f"HTTP {status}{code} (expands to {expands[0]} files, "
            f"{expands[1] / MB:.0f} MB){written}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upload-mb", type=int, default=300)
    parser.add_argument("--zip-mb", type=int, default=500)
    parser.add_argument("--levels", type=int, default=4)
    parser.add_argument("--fanout", type=int, default=10)
    parser.add_argument("--blob-kb", type=int, default=50)
    parser.add_argument("--import-max-mb", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="braid-bounds-"))
    rows: list[tuple[str, int, str, float]] = []
    try:
        srv = Server(work)
        try:
            status, made = srv.api("POST", "/api/sessions", {})
            sid = made["session_id"]
            srv.api("POST", f"/api/sessions/{sid}/runs", {"input": "write a.txt warm"})
            pid = srv.proc.pid
            grown, said, took = measured(pid, lambda: upload(srv, sid, "big.bin",
                                                             args.upload_mb * MB))
            rows.append((f"{args.upload_mb} MB upload", grown, said, took))
            rest = args.zip_mb - args.upload_mb
            if rest > 0:
                upload(srv, sid, "more.bin", rest * MB)
            grown, said, took = measured(pid, lambda: download_zip(srv, sid))
            rows.append((f"{args.zip_mb} MB workdir.zip", grown, said, took))
        finally:
            srv.stop()
        bomb = work / "bomb"
        expands = make_bomb(bomb, args.levels, args.fanout, args.blob_kb)
        srv = Server(work, BRAID_IMPORT_ROOTS=str(work),
                     BRAID_IMPORT_MAX_BYTES=str(args.import_max_mb * MB))
        try:
            srv.api("POST", "/api/sessions", {})  # warm
            grown, said, took = measured(srv.proc.pid, lambda: import_bomb(srv, bomb, expands))
            rows.append((f"tree-bomb import ({args.levels} levels x {args.fanout}), "
                         f"BRAID_IMPORT_MAX_BYTES={args.import_max_mb} MB", grown, said, took))
        finally:
            srv.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"\nbench/boundaries.py on 127.0.0.1 ({os.cpu_count()} cores): peak RSS growth of "
          f"the server process (must be < {LIMIT // MB} MB)")
    ok = True
    for label, grown, said, took in rows:
        verdict = "ok" if grown < LIMIT else "OVER"
        ok = ok and grown < LIMIT
        print(f"{label:<{width}}  {grown / MB:7.1f} MB  {verdict:<4}  {took:6.1f} s  {said}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
