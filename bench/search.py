"""Search over message text (issue 24): how long a query takes over HTTP on a big index, and
what keeping the index current costs a turn.

1. 20 sessions of 5,000 turns each (a user message and an answer per turn: 200,000 rows),
   written into the index directly, the way the per-turn path writes them
   (`store.search.run_rows` → `MessageSearch.add`), a session's rows in one call. Then a real
   `braid serve` on that data dir and `GET /api/search?q=` timed from this process (the whole
   path: HTTP in, the FTS5 query, JSON out) for words that match a few rows, many, or all.
2. The per-turn cost, side by side in one run: the same one-line turn
   (`queue.send_to_end`: the real turn against the embedded demo model, in-process, on the
   same 200,000-row index) with search indexing, and with it replaced by a no-op, turns of
   the two interleaved; and `search.add` of one turn's rows alone.

Run: .venv/bin/python bench/search.py   (BENCH_SESSIONS=20 BENCH_TURNS=5000 BENCH_SAMPLES=30)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.app.braid import Braid  # noqa: E402
from server.app.memory import SERVER_ENV  # noqa: E402
from server.base.ids import new_message_id, new_session_id  # noqa: E402
from server.base.results import SearchHit  # noqa: E402
from server.base.settings import Settings  # noqa: E402
from server.features import sessions  # noqa: E402
from server.features.queue import send_to_end  # noqa: E402
from server.store.index import Index  # noqa: E402
from server.store.search import SearchRow, SqliteSearch, run_rows  # noqa: E402

TOKEN = "bench-token-0123456789"
SESSIONS = int(os.environ.get("BENCH_SESSIONS", "20"))
TURNS = int(os.environ.get("BENCH_TURNS", "5000"))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "30"))
rng = random.Random(24)
# A vocabulary with a long tail, as chat text has: a few words everywhere, most rare.
VOCAB = [f"w{i}" for i in range(20_000)]
CUMULATIVE = list(itertools.accumulate(1 / (i + 1) for i in range(len(VOCAB))))


def sentence(n: int) -> str:
    return " ".join(rng.choices(VOCAB, cum_weights=CUMULATIVE, k=n))


def message(role: str, run_id: str, text: str) -> dict[str, Any]:
    return {"id": new_message_id(), "role": role, "content": text, "run_id": run_id,
            "created_at": "2026-01-01T00:00:00Z"}


async def build(data: Path) -> None:
    """The index of SESSIONS sessions of TURNS turns, with rare words planted."""
    index = Index(data / "index.sqlite3")
    await index.open()
    search = SqliteSearch(index)
    await search.open()
    for s in range(SESSIONS):
        sid = new_session_id()
        await index.upsert_session({"session_id": sid, "user_id": "local",
                                    "title": f"Session {s}", "created_at": "2026-01-01T00:00:00Z",
                                    "forked_from_session_id": None, "root_session_id": sid})
        rows: list[SearchRow] = []
        for t in range(TURNS):
            rid = new_message_id()
            question = sentence(rng.randint(6, 30))
            if t % 1000 == 7:
                question += " okapi"  # 5 a session: 100 in all
            if s == 3 and t == 1234:
                question += " quetzalcoatl"  # once
            rows += run_rows(sid, rid, [message("user", rid, question),
                                        message("assistant", rid, sentence(rng.randint(30, 150)))])
        await search.add(rows)
    await index.close()


class Server:
    def __init__(self, data: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, **SERVER_ENV, "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo"}
        self.log = open(data.parent / "server.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--data-dir", str(data)], cwd=ROOT, env=env, stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login", timeout=2)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def search(self, q: str) -> tuple[float, list[Any]]:
        url = f"http://127.0.0.1:{self.port}/api/search?" + urllib.parse.urlencode({"q": q})
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        start = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as res:
            body = json.loads(res.read())
        return time.perf_counter() - start, body["results"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.2f}"


def p95(values: list[float]) -> str:
    return f"{sorted(values)[int(len(values) * 0.95) - 1] * 1000:8.2f}"


QUERIES = [
    ("one match", "quetzalcoatl"),
    ("100 matches", "okapi"),
    ("commonest word", "w1"),
    ("two common words", "w5 w9"),
    ("3-letter prefix", "w12"),
    ("4-letter prefix", "w123"),
    ("one letter", "w"),
    ("no match", "zzzzzz"),
    ("hostile", 'NEAR("w3" *'),
]


def query_table(srv: Server) -> None:
    print(f"\n1. GET /api/search over HTTP: {SESSIONS} sessions x {TURNS:,} turns "
          f"({SESSIONS * TURNS * 2:,} rows), median of {SAMPLES}")
    print(f"{'query':<22}{'q':<16}{'results':>8}{'median ms':>11}{'p95 ms':>9}")
    for name, q in QUERIES:
        srv.search(q)  # warm
        times, found = [], 0
        for _ in range(SAMPLES):
            t, results = srv.search(q)
            times.append(t)
            found = len(results)
        print(f"{name:<22}{q:<16}{found:>8}{ms(times):>11}{p95(times):>9}")


class NoSearch:
    """Search indexing left out: the turn without it, for the side-by-side figure."""

    async def open(self) -> bool:
        return False

    async def add(self, rows: list[SearchRow]) -> None:
        return None

    async def copy_session(self, from_session_id: str, to_session_id: str) -> None:
        return None

    async def delete_session(self, session_id: str) -> None:
        return None

    async def clear(self) -> None:
        return None

    async def search(self, user_id: str, query: str, limit: int) -> list[SearchHit]:
        return []


async def turn_table(data: Path) -> None:
    braid = Braid(Settings(data_dir=data, model="demo"))
    await braid.start()
    real, none = braid.search, NoSearch()
    adds: list[float] = []
    real_add = real.add

    async def timed_add(rows: list[SearchRow]) -> None:
        start = time.perf_counter()
        await real_add(rows)
        adds.append(time.perf_counter() - start)

    real.add = timed_add  # type: ignore[method-assign]
    sid = (await sessions.create_session(braid, "local"))["session_id"]
    for i in range(5):  # warm: the session open, its first turns
        await send_to_end(braid, "local", sid, f"say warm {i}")
    adds.clear()
    times: dict[str, list[float]] = {"with": [], "without": []}
    for i in range(SAMPLES):
        for name, impl in (("with", real), ("without", none)) if i % 2 else \
                (("without", none), ("with", real)):
            braid.search = impl  # type: ignore[assignment]
            start = time.perf_counter()
            run = await send_to_end(braid, "local", sid,
                                            f"say {sentence(20)} and {sentence(20)}")
            times[name].append(time.perf_counter() - start)
            assert run["status"] == "COMPLETED", run
    braid.search = real
    await braid.stop()
    w, wo = times["with"], times["without"]
    print(f"\n2. A one-line turn (in-process, demo model) on the same index, median of {SAMPLES}"
          " each, interleaved")
    print(f"{'turn with search indexing':<40}{ms(w):>10} ms")
    print(f"{'turn without it':<40}{ms(wo):>10} ms")
    print(f"{'difference of the medians':<40}"
          f"{(statistics.median(w) - statistics.median(wo)) * 1000:>10.2f} ms")
    print(f"{'search.add of the turn (2 rows) alone':<40}{ms(adds):>10} ms")


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="braid-bench-search-"))
    data = tmp / "data"
    data.mkdir()
    try:
        start = time.perf_counter()
        asyncio.run(build(data))
        size = (data / "index.sqlite3").stat().st_size
        print(f"built {SESSIONS * TURNS * 2:,} rows in {time.perf_counter() - start:.1f} s "
              f"(index.sqlite3: {size / 1e6:.0f} MB)")
        srv = Server(data)
        try:
            query_table(srv)
        finally:
            srv.stop()
        asyncio.run(turn_table(data))
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept: {data}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
