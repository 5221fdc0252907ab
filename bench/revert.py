"""Revert cost: does it follow the turn's change, not the size of the workdir?

For a turn that modified 1 or 100 files, in a workdir of 100 or 10,000 files, prints the
median time of `list_turn_files`, `turn_diff` (whole turn), `revert_turn` and `unrevert_turn`,
called through the core as the socket and the HTTP API call them (a real `Braid`, the demo
model, the session's worker thread). A revert snapshots the user's edits first, which is one
`git status` of the workdir; its median is printed alongside as the floor it cannot go under.

Run: .venv/bin/python bench/revert.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.app.braid import Braid  # noqa: E402
from server.base.settings import Settings  # noqa: E402
from server.features import (  # noqa: E402
    revert,
    sessions,
)
from server.features.queue import send_to_end  # noqa: E402

USER = "local"
SAMPLES = 11


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.2f}"


async def timed(fn, *args) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    await fn(*args)
    return time.perf_counter() - start


async def setup(braid: Braid, workdir_files: int, touched: int) -> tuple[str, str]:
    """A session whose workdir holds `workdir_files` files (committed as the user's), then a
    turn that modifies `touched` of them. Returns (session_id, turn_id)."""
    sid = (await sessions.create_session(braid, USER, "bench"))["session_id"]
    work = braid.store.path(sid) / "workdir"
    for i in range(workdir_files):
        folder = work / f"d{i % 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n" * 8)
    await send_to_end(braid, USER, sid, "say seeded")  # commits them as user-edit
    lines = [f"write d{i % 100:02d}/f{i}.txt changed by the turn {i}" for i in range(touched)]
    run = await send_to_end(braid, USER, sid, "\n".join(lines))
    assert run["status"] == "COMPLETED", run
    return sid, run["run_id"]


async def measure(braid: Braid, sid: str, tid: str) -> dict[str, float]:
    handle = braid.store.get(sid)
    samples: dict[str, list[float]] = {k: [] for k in ("list", "diff", "revert", "unrevert",
                                                       "status")}
    for _ in range(SAMPLES):
        samples["list"].append(await timed(revert.list_turn_files, braid, USER, sid, tid))
        samples["diff"].append(await timed(revert.turn_diff, braid, USER, sid, tid))
        samples["revert"].append(await timed(revert.revert_turn, braid, USER, sid, tid))
        samples["unrevert"].append(await timed(revert.unrevert_turn, braid, USER, sid, tid))
        start = time.perf_counter()
        await handle.call(lambda git: git.scan.dirty_paths())
        samples["status"].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in samples.items()}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        braid = Braid(Settings(data_dir=Path(tmp) / "data", token="bench-token-0123456789"))
        await braid.start()
        rows = []
        try:
            for workdir_files in (100, 10_000):
                for touched in (1, 100):
                    sid, tid = await setup(braid, workdir_files, touched)
                    rows.append((workdir_files, touched, await measure(braid, sid, tid)))
        finally:
            await braid.stop()
    print(f"median of {SAMPLES} runs, milliseconds")
    print(f"{'workdir':>8} {'touched':>8} {'list_files':>10} {'turn_diff':>10} "
          f"{'revert':>9} {'unrevert':>9} {'git status':>10}")
    for workdir_files, touched, m in rows:
        print(f"{workdir_files:>8} {touched:>8} {ms(m['list']):>10} {ms(m['diff']):>10} "
              f"{ms(m['revert'])} {ms(m['unrevert'])} {ms(m['status']):>10}")


if __name__ == "__main__":
    asyncio.run(main())
