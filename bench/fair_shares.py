"""Fair shares between users (issue 34): another user's turn under one user's load, on
loopback, this tree and main side by side in one run.

Two users, real servers (`braid serve` in a subprocess, the embedded demo model). User B's
`say hello` turn (over the socket, send to `run_completed`) is timed:

  idle       nothing else going on (median of 10);
  approvals  user A's one message has 4 children × 2 grandchildren, each grandchild's write
             waiting for an answer nobody gives (BRAID_ACTIVE_TURNS=8): on main they hold
             every slot, and B waits until they are stopped (reported as the wait cut off);
  flood      user A has 16 turns of ~5 s going on (16 sessions, BRAID_ACTIVE_TURNS=16),
             B's turn meanwhile (median of 5);
  queue      a socket of A's that never reads, while A queues 80 messages of 100 KB: the
             median time of one add, the server's RSS growth, and B's turn after.

Run: .venv/bin/python bench/fair_shares.py [--main PATH]  (PATH: a checkout of main; by
default `git archive main` into a temporary folder, sharing this tree's .venv).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
CUT = 15.0  # seconds: a turn still waiting then is reported as starved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Srv:
    def __init__(self, tree: Path, data: Path, env: dict[str, str]) -> None:
        self.tree, self.data, self.port = tree, data, free_port()
        full = {**os.environ, "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo", **env}
        self.log = open(data.parent / f"server-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--data-dir", str(data)], cwd=tree, env=full, stdout=self.log,
            stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", "bea",
                              "--data-dir", str(data)], cwd=tree, capture_output=True,
                             text=True, check=True)
        self.other = out.stdout.strip().splitlines()[-1]

    def api(self, method: str, path: str, body: Any = None, token: str = TOKEN) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"null")

    def socket(self, sid: str, token: str = TOKEN) -> Any:
        return connect(f"ws://127.0.0.1:{self.port}/ws/sessions/{sid}?format=json",
                       additional_headers={"Authorization": f"Bearer {token}"},
                       max_size=None, ping_interval=None)

    def rss(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f
                        if line.startswith("VmRSS:"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def call(ws: Any, action: str, **params: Any) -> dict[str, Any]:
    rid = f"r{time.monotonic_ns()}"
    ws.send(json.dumps({"action": action, "request_id": rid, **params}))
    while True:
        frame = json.loads(ws.recv(timeout=60))
        if frame.get("request_id") == rid:
            return dict(frame)


def turn(ws: Any, text: str, cut: float = CUT) -> float:
    """Seconds from send to the run's end (`cut` if it has not ended by then)."""
    start = time.perf_counter()
    sent = call(ws, "send_message", text=text)
    assert "data" in sent, sent
    run_id = sent["data"]["run_id"]
    deadline, cancelled = start + cut, False
    while True:
        wait = 60.0 if cancelled else max(deadline - time.perf_counter(), 0.001)
        try:
            frame = json.loads(ws.recv(timeout=wait))
        except TimeoutError:  # starved: stopped, so the next turn may start
            cancelled = True
            ws.send(json.dumps({"action": "cancel_run", "run_id": run_id}))
            continue
        if frame.get("event") in ("run_completed", "run_error", "run_cancelled") \
                and frame["data"]["run_id"] == run_id:
            return cut if cancelled else time.perf_counter() - start


def b_turns(srv: Srv, count: int) -> list[float]:
    sid = srv.api("POST", "/api/sessions", {}, token=srv.other)["session_id"]
    ws = srv.socket(sid, srv.other)
    try:
        return [turn(ws, "say hello") for _ in range(count)]
    finally:
        ws.close()


def stalled_socket(srv: Srv, sid: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /ws/sessions/{sid} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
                  ).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    return sock


def measure(tree: Path, work: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    srv = Srv(tree, work / "idle", {"BRAID_ACTIVE_TURNS": "8"})
    try:
        idle = statistics.median(b_turns(srv, 10))
        out["idle"] = f"{idle * 1000:.0f} ms"
        sid = srv.api("POST", "/api/sessions", {})["session_id"]
        srv.api("PATCH", f"/api/sessions/{sid}", {"approvals": "writes"})
        ws = srv.socket(sid)
        text = "\n".join(f"spawn c{i}: spawn g1: write a.txt x\\nspawn g2: write b.txt y"
                         for i in range(4))
        call(ws, "send_message", text=text)
        seen, deadline = 0, time.monotonic() + 60
        while seen < 8 and time.monotonic() < deadline:
            frame = json.loads(ws.recv(timeout=60))
            seen += frame.get("event") == "approval_needed"
        waited = b_turns(srv, 1)[0]
        out["approvals"] = (f"> {CUT:.0f} s (starved)" if waited >= CUT
                            else f"{waited * 1000:.0f} ms ({waited / idle:.1f}× idle)")
        ws.close()
    finally:
        srv.stop()
    srv = Srv(tree, work / "flood", {"BRAID_ACTIVE_TURNS": "16"})
    try:
        idle = statistics.median(b_turns(srv, 5))
        held = []
        for _ in range(16):
            sid = srv.api("POST", "/api/sessions", {})["session_id"]
            ws = srv.socket(sid)
            call(ws, "send_message", text="slow 50\nsay " + " ".join(["w"] * 100))
            held.append(ws)
        time.sleep(0.5)
        loaded = statistics.median(b_turns(srv, 5))
        out["flood"] = f"{loaded * 1000:.0f} ms ({loaded / idle:.1f}× idle)"
        for ws in held:
            ws.close()
    finally:
        srv.stop()
    srv = Srv(tree, work / "queue", {})
    try:
        idle = statistics.median(b_turns(srv, 5))
        sid = srv.api("POST", "/api/sessions", {})["session_id"]
        ws = srv.socket(sid)
        stalled = stalled_socket(srv, sid)
        base = srv.rss()
        call(ws, "send_message", text="slow 300\nsay " + " ".join(["w"] * 400))
        adds = []
        for i in range(80):
            start = time.perf_counter()
            call(ws, "send_message", text=f"say {i} " + "x" * 99_990, queue=True)
            adds.append(time.perf_counter() - start)
        grown = srv.rss() - base
        loaded = statistics.median(b_turns(srv, 3))
        out["queue add"] = f"{statistics.median(adds) * 1000:.0f} ms (last {adds[-1] * 1000:.0f})"
        out["queue RSS"] = f"+{grown:.0f} MB"
        out["queue turn"] = f"{loaded * 1000:.0f} ms ({loaded / idle:.1f}× idle)"
        stalled.close()
        ws.close()
    finally:
        srv.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--main", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="braid-fair-") as tmp:
        work = Path(tmp)
        main_tree = args.main
        if main_tree is None:
            main_tree = work / "main"
            main_tree.mkdir()
            archive = subprocess.run(["git", "archive", "main"], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(main_tree)], input=archive, check=True)
        results = {}
        for name, tree in (("main", main_tree), ("this", ROOT)):
            (work / name).mkdir(exist_ok=True)
            results[name] = measure(tree, work / name)
        rows = list(results["this"])
        print(f"{'B: say hello':<14} {'main':>28} {'this':>28}")
        for row in rows:
            print(f"{row:<14} {results['main'].get(row, '-'):>28} {results['this'][row]:>28}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
