"""Explicit lanes (issue 8): how fast a session's page, its DAG panel and `list_turn_files`
answer while that session's turn runs `shell sleep`, side by side with the same requests on
the idle session, against a real server on 127.0.0.1 (HTTP and socket in, answer out).

    .venv/bin/python bench/lanes.py [--samples 15] [--sleep 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "lanes-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(base: str, method: str, path: str, body: Any = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=120) as res:
        return res.read()


def median_ms(fn: Any, samples: int) -> float:
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(base: str, ws: Any, sid: str, turn_id: str, samples: int) -> dict[str, float]:
    def files() -> None:
        ws.send(json.dumps({"action": "list_turn_files", "turn_id": turn_id,
                            "request_id": "f"}))
        while json.loads(ws.recv(timeout=120)).get("request_id") != "f":
            pass

    return {
        "page GET /s/{id}": median_ms(lambda: http(base, "GET", f"/s/{sid}"), samples),
        "DAG GET /s/{id}/dag": median_ms(lambda: http(base, "GET", f"/s/{sid}/dag"), samples),
        "list_turn_files (socket)": median_ms(files, samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--sleep", type=int, default=20, help="< 30 (the shell timeout)")
    args = parser.parse_args()
    from websockets.sync.client import connect

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "PYTHONMALLOC": "malloc",
               "BRAID_SERVER_MALLOC": "1",  # scripts/run's allocator
               "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo",
               "BRAID_SHELL": "on"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--port", str(port), "--data-dir",
             str(Path(tmp) / "data")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    http(base, "GET", "/login")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            sid = json.loads(http(base, "POST", "/api/sessions", {}))["session_id"]
            first = json.loads(http(base, "POST", f"/api/sessions/{sid}/runs",
                                    {"input": "write a.txt hello"}))
            with connect(f"ws://127.0.0.1:{port}/ws/sessions/{sid}?format=json",
                         additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                measure(base, ws, sid, first["run_id"], 2)  # warm up (templates, caches)
                idle = measure(base, ws, sid, first["run_id"], args.samples)
                ws.send(json.dumps({"action": "send_message", "request_id": "s",
                                    "text": f"shell sleep {args.sleep}"}))
                while json.loads(ws.recv(timeout=60)).get("event") != "tool_call":
                    pass
                time.sleep(0.5)  # the command is running now
                t0 = time.monotonic()
                busy = measure(base, ws, sid, first["run_id"], args.samples)
                took = time.monotonic() - t0
                ws.send(json.dumps({"action": "cancel_run", "request_id": "c"}))
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{'request':<28} {'idle ms':>9} {'during shell ms':>16} {'ratio':>7}"
          f"   (median of {args.samples}; `shell sleep {args.sleep}` running)")
    for name in idle:
        print(f"{name:<28} {idle[name]:>9.1f} {busy[name]:>16.1f} "
              f"{busy[name] / idle[name]:>7.2f}")
    print(f"all {3 * args.samples} requests during the command took {took:.1f} s "
          f"(the command runs {args.sleep} s)")


if __name__ == "__main__":
    main()
