"""Checkpoint cost: does it follow the change, not the history or the workdir size?

Prints medians measured side by side in one run:
  1. a turn's checkpoint (history message files + run record + one workdir file) at turn 10
     vs turn 1,000 of one session;
  2. a one-file tool-batch checkpoint with 100 vs 10,000 files in workdir/, next to
     `git add -A && git commit` and pygit2 `index.add_all` + `write_tree` on the same trees.

Run: .venv/bin/python bench/checkpoint.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.core import layout  # noqa: E402
from server.core.git_session import DISK, GitSession, history_path, run_path, to_json_bytes  # noqa: E402
from server.core.ids import new_message_id, now_iso  # noqa: E402

SAMPLES = 15


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}"


def simulated_turn(git: GitSession, turn: int) -> float:
    """One turn's final checkpoint, as turns.checkpoint writes it; returns its duration."""
    seq = layout.next_seq(git)
    run_id = new_message_id()
    changes: dict[str, object] = {}
    for role, content in (("user", f"write f{turn % 50}.txt"), ("assistant", "done")):
        msg = {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
               "created_at": now_iso()}
        changes[history_path(seq, role, msg["id"])] = to_json_bytes(msg)
        seq += 1
    changes[run_path(layout.run_count(git), run_id)] = to_json_bytes(
        {"run_id": run_id, "status": "COMPLETED", "created_at": now_iso()})
    target = git.path / "workdir" / f"f{turn % 50}.txt"
    target.write_text(f"turn {turn}\n")
    changes[f"workdir/f{turn % 50}.txt"] = DISK
    start = time.perf_counter()
    git.write_checkpoint(changes, summary=f"Turn {turn}", kind="turn", run_id=run_id,
                         message_index=2, sync_index=False)
    elapsed = time.perf_counter() - start
    git.flush_index()  # what a turn does after its last checkpoint, off the checkpoint path
    return elapsed


def bench_history(root: Path) -> tuple[float, float]:
    """Two sessions, one at turn 10 and one at turn 1,000, then their next turns measured
    alternately, so both see the same machine state."""
    meta = {"title": "bench", "user_id": "local", "created_at": now_iso()}
    short = GitSession.create(root / "short", {"session_id": "a" * 32, **meta})
    long = GitSession.create(root / "long", {"session_id": "b" * 32, **meta})
    for turn in range(1, 10):
        simulated_turn(short, turn)
    for turn in range(1, 1000):
        simulated_turn(long, turn)
    early: list[float] = []
    late: list[float] = []
    for i in range(SAMPLES):
        early.append(simulated_turn(short, 10 + i))
        late.append(simulated_turn(long, 1000 + i))
    return statistics.median(early), statistics.median(late)


def make_tree(root: Path, n_files: int) -> GitSession:
    GitSession.create(root, {"session_id": "y" * 32, "title": "bench",
                                   "user_id": "local", "created_at": now_iso()})
    work = root / "workdir"
    for i in range(n_files):
        d = work / f"d{i % 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i}.txt").write_text(f"content {i}\n" * 4)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "seed"], check=True)
    return GitSession(root)


def bench_workdir(root: Path, n_files: int) -> dict[str, float]:
    git = make_tree(root / f"w{n_files}", n_files)
    path = git.path
    ours: list[float] = []
    turn_end: list[float] = []
    cli: list[float] = []
    addall: list[float] = []
    for i in range(SAMPLES):
        (path / "workdir/d00/file0.txt").write_text(f"ours {i}\n")
        start = time.perf_counter()
        git.write_checkpoint({"workdir/d00/file0.txt": DISK}, summary="batch",
                             kind="tool-batch", sync_index=False)
        ours.append(time.perf_counter() - start)

        # After the turn's last checkpoint, the index is brought in step once.
        start = time.perf_counter()
        git.flush_index()
        turn_end.append(time.perf_counter() - start)

        (path / "workdir/d00/file0.txt").write_text(f"cli {i}\n")
        start = time.perf_counter()
        subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(path), "commit", "-qm", "batch"], check=True)
        cli.append(time.perf_counter() - start)

        (path / "workdir/d00/file0.txt").write_text(f"addall {i}\n")
        repo = git.repo
        start = time.perf_counter()
        index = repo.index
        index.read(False)
        index.add_all()
        index.write()
        tree = index.write_tree()
        repo.create_commit("HEAD", git.signature, git.signature, "batch", tree,
                           [repo.head.target])
        addall.append(time.perf_counter() - start)
    return {"ours": statistics.median(ours), "turn": statistics.median(turn_end),
            "cli": statistics.median(cli),
            "addall": statistics.median(addall)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        early, late = bench_history(root)
        small = bench_workdir(root, 100)
        large = bench_workdir(root, 10_000)
    print(f"Checkpoint benchmark (median of {SAMPLES}, milliseconds)\n")
    print("1. Growing history: a turn checkpoint (2 messages + 1 file) at turn 10 vs 1,000")
    print(f"   {'turn 10':>12} {'turn 1,000':>12} {'ratio':>8}")
    print(f"   {ms(early):>12} {ms(late):>12} {late / early:8.2f}")
    print("\n2. One-file tool-batch checkpoint vs workdir size")
    print(f"   {'method':<32} {'100 files':>10} {'10,000 files':>13} {'ratio':>8}")
    for key, name in (("ours", "Braid tool-batch checkpoint"),
                      ("turn", "  + index sync after the turn"),
                      ("addall", "pygit2 add_all + write_tree"),
                      ("cli", "git add -A && git commit")):
        print(f"   {name:<32} {ms(small[key]):>10} {ms(large[key]):>13} "
              f"{large[key] / small[key]:8.2f}")
    print(f"\n   at 10,000 files Braid is {large['cli'] / large['ours']:.1f}x faster than "
          f"git add -A && git commit")


if __name__ == "__main__":
    main()
