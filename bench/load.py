"""Load and soak: N sockets × M turns against a real server on 127.0.0.1 (DESIGN §4, issue 11).

Each socket belongs to its own session and sends its turns one after another; all sockets run
at once. Reported: send→run_completed latency (p50, p99), errors, the server's RSS and thread
count cold, at the start (after one warm-up turn), right after the load and once the sockets
are closed and the sessions idle,
and a final consistency check of every repository (each turn's file in HEAD, every run
COMPLETED, `git status` clean, `git fsck --strict` clean).

    .venv/bin/python bench/load.py --sockets 200 --turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "load-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MB, threads) of a process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


def api(base: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.loads(res.read() or b"null")


async def one_socket(ws_url: str, sid: str, turns: int, latencies: list[float],
                     errors: list[str]) -> None:
    from websockets.asyncio.client import connect

    async with connect(f"{ws_url}/ws/sessions/{sid}?format=json", open_timeout=60,
                       additional_headers={"Authorization": f"Bearer {TOKEN}"},
                       max_size=None) as ws:
        for i in range(turns):
            started = time.perf_counter()
            await ws.send(json.dumps({"action": "send_message", "request_id": f"t{i}",
                                      "text": f"write f{i}.txt load {sid[:8]} {i}"}))
            run_id = None
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
                if frame.get("type") == "error":
                    errors.append(f"{sid}: {frame['error']}")
                    break
                if frame.get("type") == "result" and frame.get("request_id") == f"t{i}":
                    run_id = frame["data"]["run_id"]
                data = frame.get("data") or {}
                if frame.get("event") in ("run_completed", "run_error", "run_cancelled") \
                        and data.get("run_id") == run_id:
                    if frame["event"] != "run_completed":
                        errors.append(f"{sid}: {frame['event']} {data.get('error')}")
                    latencies.append(time.perf_counter() - started)
                    break


def check_repo(folder: Path, sid: str, turns: int) -> list[str]:
    problems = []

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)

    for i in range(turns):
        shown = git("show", f"HEAD:workdir/f{i}.txt")
        if shown.returncode or shown.stdout != f"load {sid[:8]} {i}\n":
            problems.append(f"{sid}: f{i}.txt not in HEAD")
    if git("status", "--porcelain").stdout:
        problems.append(f"{sid}: git status not clean")
    if git("fsck", "--strict").returncode:
        problems.append(f"{sid}: fsck failed")
    return problems


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2,
                        help="bursts one after another; idle figures after each")
    parser.add_argument("--idle", type=float, default=3.0,
                        help="seconds after which an idle session gives back its thread")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="braid-load-")) / "data"
    port = free_port()
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    env = {**os.environ, "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo",
           "BRAID_IDLE_SECONDS": str(args.idle)}
    log = open(data_dir.parent / "server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--host",
                               "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/login", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        cold = proc_status(server.pid)
        # "Start" is a server that has served one turn: the model client and the modules a
        # first turn imports (openai, httpx...) are a one-off cost, not load; the cold figure
        # is reported beside it.
        warm_sid = api(base, "POST", "/api/sessions", {})["session_id"]
        asyncio.run(one_socket(ws_url, warm_sid, 1, [], []))
        time.sleep(args.idle * 2 + 2)
        before = proc_status(server.pid)
        latencies: list[float] = []
        errors: list[str] = []
        sids: list[str] = []
        idles: list[tuple[float, int]] = []
        wall = 0.0
        for _ in range(args.rounds):  # each round on new sessions: a leak grows per round
            round_sids = [api(base, "POST", "/api/sessions", {})["session_id"]
                          for _ in range(args.sockets)]
            sids += round_sids

            async def load(round_sids: list[str] = round_sids) -> None:
                results = await asyncio.gather(
                    *(one_socket(ws_url, sid, args.turns, latencies, errors)
                      for sid in round_sids), return_exceptions=True)
                errors.extend(f"{type(r).__name__}: {r}" for r in results
                              if isinstance(r, BaseException))

            started = time.perf_counter()
            asyncio.run(load())
            wall = time.perf_counter() - started
            loaded = proc_status(server.pid)
            time.sleep(args.idle * 2 + 2)  # sockets closed: the sessions go idle
            idles.append(proc_status(server.pid))
        idle = idles[0]
        problems: list[str] = []
        runs_ok = 0
        for sid in sids:
            problems += check_repo(data_dir / "sessions" / sid, sid, args.turns)
            runs = api(base, "GET", f"/api/sessions/{sid}")["runs"]
            runs_ok += sum(1 for r in runs if r["status"] == "COMPLETED")
    finally:
        server.terminate()
        server.wait(timeout=30)
    turns = args.sockets * args.turns * args.rounds
    rows = [
        ("sockets x turns", f"{args.sockets} x {args.turns} x {args.rounds} rounds "
                            f"({turns} turns, last round {wall:.1f} s)"),
        ("send->done p50", f"{pct(latencies, 0.5) * 1000:.0f} ms"),
        ("send->done p99", f"{pct(latencies, 0.99) * 1000:.0f} ms"),
        ("errors", str(len(errors))),
        ("RSS cold / start / loaded / idle",
         f"{cold[0]:.0f} / {before[0]:.0f} / {loaded[0]:.0f} / {idle[0]:.0f} MB "
         f"(idle/start {idle[0] / before[0]:.2f})"),
        ("threads cold / start / loaded / idle",
         f"{cold[1]} / {before[1]} / {loaded[1]} / {idle[1]} "
         f"(idle/start {idle[1] / before[1]:.2f})"),
        ("idle after each round", " / ".join(f"{r:.0f} MB, {t} threads" for r, t in idles)),
        ("runs COMPLETED in git", f"{runs_ok} / {turns}"),
        ("repos consistent", f"{len(sids) - len({p.split(':')[0] for p in problems})} / "
                             f"{len(sids)}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nbench/load.py on 127.0.0.1 (demo model, {os.cpu_count()} cores)")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for line in (errors + problems)[:10]:
        print("  !", line)
    return 0 if not errors and not problems and runs_ok == turns else 1


if __name__ == "__main__":
    sys.exit(main())
