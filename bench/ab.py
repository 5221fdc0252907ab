"""Before and after, side by side in one run: two servers, one running this checkout and one
running another revision (a temporary `git worktree`), measured interleaved so the machine's
load falls on both alike (issue 30).

Each side is a real `braid serve` (HTTP in, the real openai client against the embedded demo
model inside), on a copy of the same data: sessions of each length in BENCH_TURNS written
through this checkout's core (bench/turn.py `build_session`, as a one-file turn writes them)
and a 500-turn one. Measured on both, turn by turn alternating which side goes first:

  - a one-file turn (`POST /api/sessions/{id}/runs` until the finished run comes back): its
    wall time, and the server's CPU time for it (/proc: user + system, every thread), which
    the other engineers' load on a shared machine moves far less than the wall time;
  - the session page `GET /s/{id}` (bytes, ms) at each length;
  - `fork_session` of the 500-turn session (the page and the fork once both servers are at
    rest: no background `git repack` of what the turns wrote);
  - in Chromium (BENCH_CHROMIUM=0 leaves it out): opening the longest session's page until
    its socket is connected and it is painted, and a 3,000-word answer (BENCH_WORDS) from
    Enter to its last word shown, each in a fresh session (bench/stream.py's measures).

Then the targets of issue 30 for this checkout, and whether they hold.

Run: .venv/bin/python bench/ab.py --base REV   (BENCH_TURNS=10,1000,5000 BENCH_SAMPLES=15)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
sys.path.insert(0, str(ROOT / "bench"))
TOKEN = "bench-token-0123456789"
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "15"))
LENGTHS = [int(n) for n in os.environ.get("BENCH_TURNS", "10,1000,5000").split(",")]
FORKED = 500  # turns of the session forked
WORDS = int(os.environ.get("BENCH_WORDS", "3000"))  # the answer streamed in Chromium
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system time of the process, all its threads (the demo model included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


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
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{name} did not start") from None
                time.sleep(0.1)
        self.turns = 0

    def call(self, method: str, path: str,
             body: dict[str, object] | None = None) -> tuple[float, bytes]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                     "Cookie": f"braid_token={TOKEN}"})
        start = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as resp:
            raw = resp.read()
        return (time.perf_counter() - start) * 1000, raw

    def turn(self, sid: str) -> tuple[float, float]:
        """(wall ms, server CPU ms) of one one-file turn."""
        self.turns += 1
        text = f"write notes/t{self.turns % 50}.txt turn {self.turns}"
        cpu = cpu_seconds(self.proc.pid)
        took, raw = self.call("POST", f"/api/sessions/{sid}/runs", {"input": text})
        cpu = (cpu_seconds(self.proc.pid) - cpu) * 1000
        run = json.loads(raw)
        if run.get("status") != "COMPLETED":
            raise RuntimeError(f"{self.name}: {run.get('status')} {run.get('error')}")
        return took, cpu

    @property
    def base_url(self) -> str:  # what bench/stream.py's measures ask of a server
        return f"http://127.0.0.1:{self.port}"

    def new_session(self) -> str:
        return str(json.loads(self.call("POST", "/api/sessions", {})[1])["session_id"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def build(data: Path) -> tuple[dict[int, str], str]:
    """Sessions of every length and one to fork, written through this checkout's core."""
    from turn import build_session  # bench/turn.py

    sids = {n: build_session(data, max(n - 1, 0), f"{n} turns") for n in LENGTHS}
    return sids, build_session(data, FORKED, f"{FORKED} turns")


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def interleaved(sides: list[Side], i: int) -> list[Side]:
    return sides if i % 2 == 0 else sides[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="braid-ab-") as tmp_name:
        tmp = Path(tmp_name)
        start = time.perf_counter()
        sids, forked = build(tmp / "built")
        print(f"built {sum(LENGTHS) + FORKED:,} turns in {time.perf_counter() - start:.0f} s",
              flush=True)
        base_tree = tmp / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                        str(base_tree), args.base], check=True)
        (base_tree / "node_modules").symlink_to(ROOT / "node_modules")
        sides: list[Side] = []
        turns: dict[tuple[str, int], list[tuple[float, float]]] = {}
        pages: dict[tuple[str, int], list[tuple[float, int]]] = {}
        forks: dict[str, list[float]] = {}
        chromium: dict[tuple[str, str], list[float]] = {}
        try:
            for name, tree in (("base", base_tree), ("this", ROOT)):
                shutil.copytree(tmp / "built", tmp / f"{name}-data", symlinks=True)
                sides.append(Side(name, tree, tmp / f"{name}-data"))
            measure(sides, sids, forked, turns, pages, forks, chromium)
        finally:
            for side in sides:
                side.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base_tree)], check=False)
    report(args.base, turns, pages, forks, chromium)


def children(pid: int) -> list[str]:
    """The pids of the process's children (every thread's)."""
    found: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += (task / "children").read_text().split()
        except OSError:  # a thread that ended meanwhile
            pass
    return found


def settle(sides: list[Side], calm: float = 5.0, most: float = 600.0) -> None:
    """Wait until no server has had a child for `calm` seconds: the turns just written leave
    each session to the idle packer (`git repack` 2 s after the last write), and on two cores
    a repack of a 5,000-turn session beside the page or the fork timed that instead of them
    (the page of either side took twice its time in such a run)."""
    deadline = time.monotonic() + most
    since = time.monotonic()
    while time.monotonic() < deadline:
        if any(children(side.proc.pid) for side in sides):
            since = time.monotonic()
        elif time.monotonic() - since >= calm:
            return
        time.sleep(0.2)


def measure(sides: list[Side], sids: dict[int, str], forked: str,
            turns: dict[tuple[str, int], list[tuple[float, float]]],
            pages: dict[tuple[str, int], list[tuple[float, int]]],
            forks: dict[str, list[float]], chromium: dict[tuple[str, str], list[float]]) -> None:
    for side in sides:  # each session's first turn opens it (a full scan)
        for sid in sids.values():
            side.turn(sid)
        side.call("GET", f"/s/{forked}")  # the templates compiled, once
    for i in range(SAMPLES):
        for n, sid in sids.items():
            for side in interleaved(sides, i):
                turns.setdefault((side.name, n), []).append(side.turn(sid))
    settle(sides)
    for i in range(SAMPLES):
        for n, sid in sids.items():
            for side in interleaved(sides, i):
                took, raw = side.call("GET", f"/s/{sid}")
                pages.setdefault((side.name, n), []).append((took, len(raw)))
        for side in interleaved(sides, i):
            # What the other side left unsynced is flushed first: else a side that syncs
            # pays for the writeback of one that does not (the base's forks, ~300 files
            # each), in its own fsyncs' journal commit.
            os.sync()
            took, _ = side.call("POST", f"/api/sessions/{forked}/fork", {})
            forks.setdefault(side.name, []).append(took)
    if os.environ.get("BENCH_CHROMIUM", "1") != "0":
        in_chromium(sides, sids[max(LENGTHS)], chromium)


def in_chromium(sides: list[Side], longest: str,
                into: dict[tuple[str, str], list[float]]) -> None:
    """The page's side, in one browser, the two servers interleaved (seconds)."""
    from playwright.sync_api import sync_playwright
    from stream import in_chromium as answer  # bench/stream.py
    from stream import open_page

    from conftest import CHROMIUM_ARGS

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=CHROMIUM_ARGS)
        try:
            pages = {}
            for side in sides:
                pages[side.name] = browser.new_page(viewport={"width": 1400, "height": 900})
                pages[side.name].goto(f"{side.base_url}/login?token={TOKEN}")
                answer(pages[side.name], side, 20)  # type: ignore[arg-type]  # warm-up
            for i in range(max(5, SAMPLES // 3)):
                for side in interleaved(sides, i):
                    page = pages[side.name]
                    into.setdefault((side.name, "open"), []).append(
                        open_page(page, side, longest))  # type: ignore[arg-type]
                    into.setdefault((side.name, "answer"), []).append(
                        answer(page, side, WORDS))  # type: ignore[arg-type]
        finally:
            browser.close()


def report(base: str, turns: dict[tuple[str, int], list[tuple[float, float]]],
           pages: dict[tuple[str, int], list[tuple[float, int]]],
           forks: dict[str, list[float]],
           chromium: dict[tuple[str, str], list[float]]) -> None:
    def wall(side: str, n: int) -> float:
        return med([t for t, _ in turns[(side, n)]])

    def cpu(side: str, n: int) -> float:
        return med([c for _, c in turns[(side, n)]])

    print(f"\nbase = {base}, this = the checkout; medians of {SAMPLES} turns, interleaved "
          f"(shared machine: wall times move with the others' load, CPU far less)\n")
    print(f"{'':34}{'base':>10}{'this':>10}{'this/base':>10}")
    for n in LENGTHS:
        for label, f in (("wall ms", wall), ("server CPU ms", cpu)):
            b, t = f("base", n), f("this", n)
            print(f"{f'one-file turn at {n:,}, {label}':34}{b:10.1f}{t:10.1f}{t / b:10.2f}")
    for n in LENGTHS:
        b = med([t for t, _ in pages[("base", n)]])
        t = med([t for t, _ in pages[("this", n)]])
        kb_b, kb_t = pages[("base", n)][-1][1] / 1024, pages[("this", n)][-1][1] / 1024
        print(f"{f'page at {n:,} turns, ms':34}{b:10.1f}{t:10.1f}{t / b:10.2f}")
        print(f"{f'page at {n:,} turns, KB':34}{kb_b:10.1f}{kb_t:10.1f}{kb_t / kb_b:10.2f}")
    b, t = med(forks["base"]), med(forks["this"])
    print(f"{f'fork of {FORKED} turns, ms':34}{b:10.1f}{t:10.1f}{t / b:10.2f}")
    if chromium:
        for key, label in (("open", f"Chromium: open {max(LENGTHS):,} turns, ms"),
                           ("answer", f"Chromium: {WORDS:,}-word answer, ms")):
            cb = med(chromium[("base", key)]) * 1000
            ct = med(chromium[("this", key)]) * 1000
            print(f"{label:34}{cb:10.1f}{ct:10.1f}{ct / cb:10.2f}")
    fork_ms = t

    print("\nTargets (issue 30), this checkout:")
    first, last = min(LENGTHS), max(LENGTHS)
    checks = []
    if 1000 in LENGTHS and first < 1000:
        ratio = wall("this", 1000) / wall("this", first)
        checks.append((f"whole turn at 1,000 <= 1.2x turn {first}", ratio <= 1.2, f"{ratio:.2f}x"))
    if 1000 in LENGTHS and last > 1000:
        ratio = cpu("this", last) / cpu("this", 1000)
        checks.append((f"Braid's part (server CPU) at {last:,} <= 1.05x at 1,000",
                       ratio <= 1.05, f"{ratio:.2f}x"))
    page_ms = med([t for t, _ in pages[("this", last)]])
    page_kb = pages[("this", last)][-1][1] / 1024
    checks.append((f"page of {last:,} turns <= 150 KB", page_kb <= 150, f"{page_kb:.0f} KB"))
    checks.append((f"page of {last:,} turns <= 40 ms", page_ms <= 40, f"{page_ms:.0f} ms"))
    checks.append((f"fork of {FORKED} turns <= 50 ms", fork_ms <= 50, f"{fork_ms:.0f} ms"))
    for label, ok, figure in checks:
        print(f"  {'holds ' if ok else 'MISSED'} {label}: {figure}")


if __name__ == "__main__":
    main()
