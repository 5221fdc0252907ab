"""What a turn reads of the branch after each checkpoint, at 10, 1,000 and 5,000 turns
(issue 30): the history and runs listings moved to the new commit (`layout.messages`,
`window_sums`, `message_files`, `run_entries`, `find_run_path`, `next_seq`, `run_count`),
in this process, on sessions written through the core (four messages and a run record a
turn, in commits of 100 turns). Each sample is one checkpoint of a turn (two messages and
its record) followed by those reads; only the reads are timed. The lengths are measured
interleaved, median of BENCH_SAMPLES (default 60).

Target: the reads at 5,000 turns within 1.05x of 1,000 (per-turn work O(change)).

Run: .venv/bin/python bench/listings.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.base.records import to_json_bytes  # noqa: E402
from server.git.history import history_path, run_path  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.store import layout  # noqa: E402

LENGTHS = (10, 1000, 5000)
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "60"))


def turn_files(git: GitSession, turn: int, seq: int, roles: tuple[str, ...]
               ) -> tuple[str, dict[str, object]]:
    run_id = f"{turn:032x}"
    changes: dict[str, object] = {}
    for j, role in enumerate(roles):
        mid = f"{turn:016x}{j:016x}"
        changes[history_path(seq + j, role, mid)] = to_json_bytes({
            "id": mid, "role": role, "content": f"turn {turn} {role} " + "x" * 200,
            "run_id": run_id, "created_at": "2026-01-01T00:00:00Z"})
    changes[run_path(turn, run_id)] = to_json_bytes({
        "run_id": run_id, "status": "COMPLETED", "created_at": "2026-01-01T00:00:00Z"})
    return run_id, changes


def build(folder: Path, turns: int) -> GitSession:
    git = GitSession.create(folder, {"session_id": "0" * 32, "title": f"{turns}",
                                     "user_id": "local", "created_at": "now",
                                     "forked_from_session_id": None,
                                     "root_session_id": "0" * 32})
    batch: dict[str, object] = {}
    for turn in range(turns):
        _, changes = turn_files(git, turn, 4 * turn, ("user", "assistant", "tool", "assistant"))
        batch.update(changes)
        if len(batch) >= 500 or turn == turns - 1:
            git.write_checkpoint(batch, summary="built", kind="turn")
            batch = {}
    return GitSession(folder)  # opened afresh, as a server opens it


def sample(git: GitSession, turn: int) -> float:
    run_id, changes = turn_files(git, turn, layout.next_seq(git), ("user", "assistant"))
    git.write_checkpoint(changes, summary="turn", kind="turn")
    head = git.head_commit()
    start = time.perf_counter()
    layout.messages(git)
    layout.window_sums(git)
    layout.message_files(git)
    layout.run_entries(git, head, run_id)
    layout.find_run_path(git, run_id)
    layout.next_seq(git)
    layout.run_count(git)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="braid-listings-") as tmp:
        sessions = {n: build(Path(tmp) / str(n), n) for n in LENGTHS}
        turns = dict.fromkeys(LENGTHS, 0)
        times: dict[int, list[float]] = {n: [] for n in LENGTHS}
        for git in sessions.values():  # the first read parses the whole branch
            layout.messages(git)
            layout.window_sums(git)
        for i in range(SAMPLES + 5):
            for n, git in sessions.items():
                turns[n] += 1
                took = sample(git, n + turns[n])
                if i >= 5:
                    times[n].append(took)
    print(f"the reads after a checkpoint, median of {SAMPLES} (ms)")
    for n in LENGTHS:
        print(f"  at {n:>5,} turns {statistics.median(times[n]):8.3f}")
    ratio = statistics.median(times[5000]) / statistics.median(times[1000])
    print(f"\nTarget (issue 30): 5,000 within 1.05x of 1,000: {ratio:.2f}x "
          f"{'holds' if ratio <= 1.05 else 'MISSED'}")


if __name__ == "__main__":
    main()
