"""What the power-cut syncs cost a turn (DESIGN "Durability"), side by side in one run.

A turn's checkpoint as a one-file turn writes it (2 message files, the run record, one
workdir file; `GitSession.write_checkpoint`) and its run's index row (SQLite,
`Index.upsert_run`), measured
with the syncs and with every `fsync` made a no-op (what Braid did before), the two
interleaved sample by sample so a busy machine weighs on both alike. Run it once per file
system: TMPDIR picks where (`TMPDIR=/dev/shm` for tmpfs; the default /tmp is the disk here).

Run: .venv/bin/python bench/durability.py   (BENCH_SAMPLES, default 41)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.base.ids import new_message_id, now_iso  # noqa: E402
from server.base.records import new_session_meta, to_json_bytes  # noqa: E402
from server.git.history import history_path, run_path  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.store.index import Index  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "41"))
REAL_FSYNC = os.fsync


def no_fsync(fd: int) -> None:
    return None


def turn(git: GitSession, n: int) -> None:
    run_id = f"{n:032x}"
    changes: dict[str, object] = {f"workdir/f{n % 20}.txt": f"turn {n}\n".encode()}
    for seq, role in ((2 * n, "user"), (2 * n + 1, "assistant")):
        msg = {"message_id": new_message_id(), "role": role, "content": f"{role} {n}",
               "created_at": now_iso(), "seq": seq, "run_id": run_id}
        changes[history_path(seq, role, msg["message_id"])] = to_json_bytes(msg)
    changes[run_path(n, run_id)] = to_json_bytes({"run_id": run_id, "status": "COMPLETED",
                                               "created_at": now_iso()})
    git.write_checkpoint(changes, summary=f"turn {n}", kind="turn", run_id=run_id)


async def index_row(index: Index, n: int) -> None:
    """The run's row as a turn's end writes it (`Index.upsert_run`: the row and the
    session's time)."""
    now = now_iso()
    await index.upsert_run("0" * 32, {"run_id": f"{n:032x}", "status": "COMPLETED",
                                      "branch": "main", "created_at": now, "updated_at": now})


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="braid-durability-") as tmp:
        root = Path(tmp)
        meta = new_session_meta("0" * 32, "bench", "local")
        git = GitSession.create(root / "s", meta)
        index = Index(root / "index.sqlite3")
        await index.open()
        await index.upsert_session(meta)
        synced: dict[str, list[float]] = {"commit": [], "row": []}
        bare: dict[str, list[float]] = {"commit": [], "row": []}
        n = 0
        for i in range(SAMPLES * 2 + 4):
            on = i % 2 == 0
            os.fsync = REAL_FSYNC if on else no_fsync  # libgit2's and SQLite's own stay
            await index.db.execute(f"PRAGMA synchronous={'FULL' if on else 'NORMAL'}")
            n += 1
            t0 = time.perf_counter()
            turn(git, n)
            t1 = time.perf_counter()
            await index_row(index, n)
            t2 = time.perf_counter()
            if i >= 4:  # warm
                out = synced if on else bare
                out["commit"].append((t1 - t0) * 1000)
                out["row"].append((t2 - t1) * 1000)
        os.fsync = REAL_FSYNC
        await index.close()
        git.close()
    where = os.environ.get("TMPDIR", "/tmp")
    print(f"Durability cost per turn on {where} (median of {SAMPLES}, ms, interleaved)")
    print(f"   {'step':<34} {'no syncs':>9} {'synced':>9} {'cost':>8}")
    for key, name in (("commit", "turn checkpoint (objects, ref)"),
                      ("row", "run's index row (SQLite)")):
        a, b = statistics.median(bare[key]), statistics.median(synced[key])
        print(f"   {name:<34} {a:9.2f} {b:9.2f} {b - a:8.2f}")
    total = sum(statistics.median(synced[k]) - statistics.median(bare[k]) for k in synced)
    print(f"   the syncs cost a turn {total:.2f} ms (goal <= 2 ms)")


if __name__ == "__main__":
    asyncio.run(main())
