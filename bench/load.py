"""Load and soak: N sockets × M turns against a real server on 127.0.0.1 (DESIGN §4, issue 11).

Each socket belongs to its own session and sends its turns one after another; all sockets run
at once, in `--rounds` bursts on new sessions. Reported: send→run_completed latency (p50,
p99), errors, the server's RSS and threads cold, at the start (after one warm-up turn), right
after the load and once the sockets are closed and the sessions idle (after each round: a
leak grows round after round, a high-water mark does not), and a final consistency check
of every repository (each turn's file in HEAD, every run COMPLETED, `git status` clean,
`git fsck --strict` clean).

    .venv/bin/python bench/load.py --sockets 200 --turns 3
    .venv/bin/python bench/load.py --allocators default,pymalloc     # malloc vs pymalloc
    .venv/bin/python bench/load.py --sockets 100 --turns 3 --team   # + 1 vs 2 processes on PG
    .venv/bin/python bench/load.py --sockets 20 --turns 2 --rounds 1  # quick, with the flood

After the load, one socket of a new session sends `--flood` frames (60,000) and never reads
them (issue 21, row 18): the server stops reading it past BRAID_SOCKET_INFLIGHT actions, and
its RSS 30 s after the socket closed must be within 20 % of its start.

With `--team`, the same load also runs against 1 and then 2 `braid serve` processes on one
data dir and one PostgreSQL (BRAID_DATABASE_URL), sockets spread over the processes, and the
table shows the configurations side by side.
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
import threading
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


def flood(base: str, pid: int, frames: int, settle: float) -> dict[str, Any]:
    """One socket sends `frames` frames and never reads (issue 21, row 18): the server's RSS
    at the start, its peak while the frames go in, and `settle` s after the socket closed."""
    from websockets.sync.client import connect

    sid = api(base, "POST", "/api/sessions", {})["session_id"]
    ws = connect(f"{base.replace('http:', 'ws:')}/ws/sessions/{sid}?format=json",
                 additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=30,
                 close_timeout=1, legacy=True)
    start = peak = proc_status(pid)[0]
    sent = 0

    def send_all() -> None:
        nonlocal sent
        try:
            for n in range(frames):
                ws.send(json.dumps({"action": "get_dag", "request_id": n}))
                sent += 1
        except Exception:  # noqa: BLE001 - the socket is shut under a blocked send
            pass

    sender = threading.Thread(target=send_all, daemon=True)
    began = time.perf_counter()
    sender.start()
    while sender.is_alive() and time.perf_counter() - began < 60:
        sender.join(timeout=0.5)
        peak = max(peak, proc_status(pid)[0])
    time.sleep(2)  # what the server took in is handled
    peak = max(peak, proc_status(pid)[0])
    ws.socket.shutdown(socket.SHUT_RDWR)  # gone without reading
    ws.close()
    sender.join(timeout=10)
    time.sleep(settle)
    return {"sent": sent, "start": start, "peak": peak, "after": proc_status(pid)[0],
            "blocked": sent < frames}


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


def start_servers(n: int, data_dir: Path, idle: float, url: str | None,
                  extra: dict[str, str] | None = None
                  ) -> list[tuple[subprocess.Popen[bytes], str]]:
    """`n` braid serve processes on one data dir (and one database when `url`)."""
    env = {**os.environ, "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo",
           "BRAID_IDLE_SECONDS": str(idle), **(extra or {})}
    env.pop("BRAID_DATABASE_URL", None)
    if "PYTHONMALLOC" not in (extra or {}):
        env.update(PYTHONMALLOC="malloc", BRAID_SERVER_MALLOC="1")  # scripts/run's (memory.py)
    if url:
        env["BRAID_DATABASE_URL"] = url
    servers = []
    for i in range(n):
        port = free_port()
        log = open(data_dir.parent / f"server-{i}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--host",
                                 "127.0.0.1", "--port", str(port), "--data-dir",
                                 str(data_dir)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{base}/login", timeout=1)
                break
            except OSError:
                time.sleep(0.02)
        servers.append((proc, base))
    return servers


def usage(servers: list[tuple[subprocess.Popen[bytes], str]]) -> tuple[float, int]:
    """RSS and threads summed over the processes."""
    stats = [proc_status(p.pid) for p, _ in servers]
    return sum(s[0] for s in stats), sum(s[1] for s in stats)


def run_config(n: int, url: str | None, args: argparse.Namespace,
               extra: dict[str, str] | None = None) -> dict[str, Any]:
    """One load run; socket i talks to process i % n, sessions are made round-robin too."""
    data_dir = Path(tempfile.mkdtemp(prefix="braid-load-")) / "data"
    spawned = time.perf_counter()
    servers = start_servers(n, data_dir, args.idle, url, extra)
    startup = (time.perf_counter() - spawned) / n  # one after another: each one's start
    try:
        bases = [b for _, b in servers]
        cold = usage(servers)
        # "Start" is a server that has served one turn: the model client and the modules a
        # first turn imports (openai, httpx...) are a one-off cost, not load; the cold figure
        # is reported beside it.
        for base in bases:
            warm_sid = api(base, "POST", "/api/sessions", {})["session_id"]
            asyncio.run(one_socket(base.replace("http:", "ws:"), warm_sid, 1, [], []))
        time.sleep(args.idle * 2 + 2)
        before = usage(servers)
        latencies: list[float] = []
        errors: list[str] = []
        sids: list[str] = []
        idles: list[tuple[float, int]] = []
        wall = 0.0
        for _ in range(args.rounds):  # each round on new sessions: a leak grows per round
            round_sids = [api(bases[i % n], "POST", "/api/sessions", {})["session_id"]
                          for i in range(args.sockets)]
            sids += round_sids

            async def load(round_sids: list[str] = round_sids) -> None:
                results = await asyncio.gather(
                    *(one_socket(bases[i % n].replace("http:", "ws:"), sid, args.turns,
                                 latencies, errors) for i, sid in enumerate(round_sids)),
                    return_exceptions=True)
                errors.extend(f"{type(r).__name__}: {r}" for r in results
                              if isinstance(r, BaseException))

            started = time.perf_counter()
            asyncio.run(load())
            wall = time.perf_counter() - started
            loaded = usage(servers)
            time.sleep(args.idle * 2 + 2)  # sockets closed: the sessions go idle
            idles.append(usage(servers))
        idle = idles[0]
        flooded = flood(bases[0], servers[0][0].pid, args.flood, args.flood_settle) \
            if args.flood else None
        problems: list[str] = []
        runs_ok = 0
        for i, sid in enumerate(sids):
            problems += check_repo(data_dir / "sessions" / sid, sid, args.turns)
            runs = api(bases[(i + 1) % n], "GET", f"/api/sessions/{sid}")["runs"]
            runs_ok += sum(1 for r in runs if r["status"] == "COMPLETED")
    finally:
        for proc, _ in servers:
            proc.terminate()
        for proc, _ in servers:
            proc.wait(timeout=30)
    return {"startup": startup, "wall": wall, "latencies": latencies, "errors": errors,
            "problems": problems, "runs_ok": runs_ok, "sids": sids, "cold": cold, "before": before,
            "loaded": loaded, "idle": idle, "idles": idles, "flood": flooded}


def rows_of(r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    turns = args.sockets * args.turns * args.rounds
    cold, before, loaded, idle = r["cold"], r["before"], r["loaded"], r["idle"]
    bad = len({p.split(":")[0] for p in r["problems"]})
    return [
        f"{r['startup'] * 1000:.0f} ms",
        f"{r['wall']:.1f} s",
        f"{args.sockets * args.turns / r['wall']:.1f} turns/s",
        f"{pct(r['latencies'], 0.5) * 1000:.0f} ms",
        f"{pct(r['latencies'], 0.99) * 1000:.0f} ms",
        str(len(r["errors"])),
        f"{cold[0]:.0f} / {before[0]:.0f} / {loaded[0]:.0f} / {idle[0]:.0f} MB",
        f"{idle[0] / before[0]:.2f}",
        " / ".join(f"{m:.0f}" for m, _ in r["idles"]) + " MB",
        f"{cold[1]} / {before[1]} / {loaded[1]} / {idle[1]}",
        f"{idle[1] / before[1]:.2f}",
        f"{r['runs_ok']} / {turns}",
        f"{len(r['sids']) - bad} / {len(r['sids'])}",
        *flood_rows(r.get("flood")),
    ]


def flood_rows(f: dict[str, Any] | None) -> list[str]:
    if f is None:
        return ["-", "-", "-"]
    sent = f"{f['sent']}" + (" (then the server stopped reading)" if f["blocked"] else "")
    return [sent, f"{f['start']:.0f} / {f['peak']:.0f} / {f['after']:.0f} MB",
            f"{f['after'] / f['start']:.2f}" + (" ok" if f["after"] <= 1.2 * f["start"]
                                                 else " OVER 1.20")]


LABELS = ["start-up (spawn -> /login answers)", "wall time (last round)", "throughput",
          "send->done p50", "send->done p99", "errors",
          "RSS cold / start / loaded / idle", "RSS idle / start",
          "RSS idle after each round", "threads cold / start / loaded / idle",
          "threads idle / start",
          "runs COMPLETED in git", "repos consistent",
          "flood: frames sent on 1 socket, never read",
          "flood: RSS start / peak / 30 s after close", "flood: RSS after / start"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2,
                        help="bursts one after another on new sessions; idle after each")
    parser.add_argument("--idle", type=float, default=3.0,
                        help="seconds after which an idle session gives back its thread")
    parser.add_argument("--flood", type=int, default=60_000,
                        help="frames one socket sends without reading, after the load "
                             "(0: none)")
    parser.add_argument("--flood-settle", type=float, default=30.0,
                        help="seconds after the flooding socket closed when RSS is read")
    parser.add_argument("--team", action="store_true",
                        help="also 1 and 2 processes on PostgreSQL, side by side (a "
                             "throwaway cluster unless --database-url)")
    parser.add_argument("--database-url", help="a postgresql:// URL for --team")
    parser.add_argument("--allocators", default="",
                        help="PYTHONMALLOC values to run side by side, e.g. default,pymalloc "
                             "(default: the server's own choice, glibc's malloc)")
    parser.add_argument("--active-turns", default="",
                        help="BRAID_ACTIVE_TURNS values to run side by side, e.g. 0,16 "
                             "(0: no bound; unset: the server's default)")
    args = parser.parse_args()
    caps = [c.strip() for c in args.active_turns.split(",") if c.strip()]
    configs: list[tuple[str, int, str | None, dict[str, str]]] = [
        (f"SQLite, {'no' if cap == '0' else cap} cap", 1, None, {"BRAID_ACTIVE_TURNS": cap})
        for cap in caps]
    configs += [(f"SQLite, {alloc}", 1, None, {} if alloc == "default" else
                 {"PYTHONMALLOC": alloc})
                for alloc in (a.strip() for a in args.allocators.split(",")) if alloc]
    configs = configs or [("1 process, SQLite", 1, None, {})]
    cluster = None
    if args.team:
        url = args.database_url
        if not url:
            sys.path.insert(0, str(ROOT))
            from tests.pg import Cluster, _bindir

            bindir = _bindir()
            if bindir is None:
                print("PostgreSQL is not installed (scripts/setup --test installs it)")
                return 2
            cluster = Cluster(bindir).start()
            url = cluster.url
        configs += [("1 process, PG", 1, url, {}), ("2 processes, PG", 2, url, {})]
    try:
        results = []
        for label, n, db, extra in configs:
            if db and cluster is not None:  # each configuration on an empty database
                db = cluster.new_database(f"load{len(results)}")
            results.append((label, run_config(n, db, args, extra)))
    finally:
        if cluster is not None:
            cluster.stop()
    labels = [label for label, _ in results]
    table = [rows_of(r, args) for _, r in results]
    width = max(len(k) for k in LABELS)
    cols = [max(len(label), *(len(c) for c in col))
            for label, col in zip(labels, table, strict=True)]
    print(f"\nbench/load.py on 127.0.0.1 (demo model, {os.cpu_count()} cores): "
          f"{args.sockets} sockets x {args.turns} turns x {args.rounds} rounds")
    print(f"{'':<{width}}  " + "  ".join(f"{label:>{w}}" for label, w
                                         in zip(labels, cols, strict=True)))
    for i, key in enumerate(LABELS):
        cells = [f"{col[i]:>{w}}" for col, w in zip(table, cols, strict=True)]
        print(f"{key:<{width}}  " + "  ".join(cells))
    if args.team:
        base = results[-2][1]
        last = results[-1][1]
        ratio = base["wall"] / last["wall"]
        p99 = pct(last["latencies"], 0.99) / pct(base["latencies"], 0.99)
        print(f"2 processes vs 1 (PG): throughput x{ratio:.2f}, p99 x{p99:.2f}")
    ok = True
    for label, r in results:
        for line in (r["errors"] + r["problems"])[:10]:
            print(f"  ! [{label}]", line)
        ok = ok and not r["errors"] and not r["problems"] and \
            r["runs_ok"] == args.sockets * args.turns * args.rounds
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
