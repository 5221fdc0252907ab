"""Before and after, side by side in one run: the same one-file turn through two servers, one
running this checkout and one running another revision (a temporary `git worktree`), turns
of the two sides interleaved so the machine's load falls on both alike.

Each side is a real `braid serve` (HTTP in, the real openai client against the embedded
demo model inside); each sample is `POST /api/sessions/{id}/runs` with a `write` instruction
until the finished run comes back: the whole path a user waits on. Sessions are grown by the
same turns to each length in BENCH_TURNS, then sampled there.

Run: .venv/bin/python bench/ab.py --base REV   (BENCH_TURNS=10,300 BENCH_SAMPLES=21)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789"
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "21"))
LENGTHS = [int(n) for n in os.environ.get("BENCH_TURNS", "10,300").split(",")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Side:
    def __init__(self, name: str, tree: Path, data: Path) -> None:
        self.name, self.port = name, free_port()
        # scripts/run's allocator (server/app/memory.py SERVER_ENV), spelled out: the base
        # revision may not have it; an older one keeps a PYTHONMALLOC it is given.
        env = {**os.environ, "PYTHONMALLOC": "malloc", "BRAID_SERVER_MALLOC": "1",
               "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo"}
        self.log = open(data.parent / f"{name}.log", "ab")  # noqa: SIM115 - the server's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", str(data)],
            cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{name} did not start") from None
                time.sleep(0.1)
        self.session_id = self.call("POST", "/api/sessions", {})["session_id"]
        self.turns = 0

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read() or b"{}")

    def turn(self) -> float:
        self.turns += 1
        text = f"write notes/t{self.turns % 50}.txt turn {self.turns}"
        start = time.perf_counter()
        run = self.call("POST", f"/api/sessions/{self.session_id}/runs", {"input": text})
        took = time.perf_counter() - start
        if run.get("status") != "COMPLETED":
            raise RuntimeError(f"{self.name}: {run.get('status')} {run.get('error')}")
        return took * 1000

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="braid-ab-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                        str(base_tree), args.base], check=True)
        (base_tree / "node_modules").symlink_to(ROOT / "node_modules")
        sides = []
        try:
            sides = [Side("base", base_tree, Path(tmp) / "base-data"),
                     Side("this", ROOT, Path(tmp) / "this-data")]
            rows = []
            for length in LENGTHS:
                for side in sides:
                    while side.turns < length:
                        side.turn()
                taken: dict[str, list[float]] = {s.name: [] for s in sides}
                for i in range(SAMPLES):
                    for side in (sides if i % 2 == 0 else sides[::-1]):
                        taken[side.name].append(side.turn())
                base, this = (statistics.median(taken[n]) for n in ("base", "this"))
                rows.append((length, base, this))
        finally:
            for side in sides:
                side.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base_tree)], check=False)
    print(f"\nOne-file turn, HTTP in to the finished run (median of {SAMPLES}, ms), "
          f"base = {args.base}")
    print(f"{'at turn':>10} {'base':>10} {'this':>10} {'this/base':>10}")
    for length, base, this in rows:
        print(f"{length:>10} {base:>10.1f} {this:>10.1f} {this / base:>10.2f}")


if __name__ == "__main__":
    main()
