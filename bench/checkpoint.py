"""Checkpoint cost: does it follow the change, not the history or the workdir size?

Prints medians measured side by side in one run:
  1. a turn's checkpoint (history message files + run record + one workdir file) at turn 10
     vs turn 1,000 of one session;
  2. a one-file tool-batch checkpoint with 100 vs 10,000 files in workdir/, next to
     `git add -A && git commit` and pygit2 `index.add_all` + `write_tree` on the same trees;
  3. side by side with agno 3.1.10 (`SqliteDb`, `checkpoint="tool-batch"`) at run 10, 100
     and 1,000, the same run shape on both sides: a user message, 5 tool batches (a tool
     call carrying 2 KB and its result) and an answer. Braid's figure per checkpoint is the
     run's 6 commits plus its one index flush, divided by 6 (each checkpoint's share of the
     index work); agno's is its 5 `checkpoint_run` calls and the end's `cleanup_and_store`,
     divided by 6. agno runs in its own throwaway venv (created here, outside the checkout,
     under ~/.cache/braid/agno-venv; BRAID_AGNO_VENV moves it), driven through
     bench/agno_side.py without a model; runs of both sides are interleaved. A third
     column runs Braid's side again in a tmpfs (BENCH_TMPFS, /dev/shm), where syncs cost
     nothing: what is Braid's own work, against agno on the disk.

Run: .venv/bin/python bench/checkpoint.py   (BENCH_AGNO=0 leaves section 3 out)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.base.ids import new_message_id, now_iso  # noqa: E402
from server.base.records import to_json_bytes  # noqa: E402
from server.git.history import (
    history_path,  # noqa: E402
    run_path,  # noqa: E402
)
from server.git.session import GitSession  # noqa: E402
from server.git.workdir.staging import DISK  # noqa: E402
from server.store import layout  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "15"))
AGNO = "agno==3.1.10"
AGNO_VENV = Path(os.environ.get("BRAID_AGNO_VENV",
                                Path.home() / ".cache" / "braid" / "agno-venv"))
RUN_LENGTHS = tuple(int(n) for n in os.environ.get("BENCH_RUNS", "10,100,1000").split(","))
BATCHES, PAYLOAD = 5, 2048
ISSUE_AGNO_MS = "2.7-3.5"  # what issue 9 measured for agno's checkpoint, runs 10 to 1,000


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
    git.index.flush()  # what a turn does after its last checkpoint, off the checkpoint path
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
        git.index.flush()
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


# -- 3. side by side with agno -------------------------------------------------------------


def braid_run(git: GitSession, n: int) -> list[float]:
    """One run of the shared shape; the time of each commit, the flush added to the last."""
    run_id = new_message_id()
    seq = layout.next_seq(git)
    record_path = layout.new_run_path(git, run_id)
    record = {"run_id": run_id, "status": "RUNNING", "branch": "main", "created_at": now_iso()}

    def msg(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
        return {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
                "created_at": now_iso(), **extra}

    pending = [msg("user", f"write the files, run {n}")]
    times: list[float] = []
    for b in range(BATCHES):
        call = {"id": f"call_{n}_{b}", "type": "function", "function": {
            "name": "write_file",
            "arguments": json.dumps({"path": f"f{b}.txt", "content": "x" * PAYLOAD})}}
        pending += [msg("assistant", None, tool_calls=[call]),
                    msg("tool", f"wrote {PAYLOAD} bytes", tool_call_id=call["id"])]
        (git.path / "workdir" / f"f{b}.txt").write_text(f"run {n}\n" + "x" * PAYLOAD)
        changes: dict[str, object] = {f"workdir/f{b}.txt": DISK}
        times.append(_commit(git, pending, seq, changes, record_path, record, "tool-batch"))
        seq += len(pending)
        pending = []
    record["status"] = "COMPLETED"
    pending.append(msg("assistant", f"done: wrote {BATCHES} files"))
    times.append(_commit(git, pending, seq, {}, record_path, record, "turn"))
    start = time.perf_counter()
    git.index.flush()
    times[-1] += time.perf_counter() - start
    return [t * 1000 for t in times]


def _commit(git: GitSession, msgs: list[dict[str, Any]], seq: int, changes: dict[str, object],
            record_path: str, record: dict[str, Any], kind: str) -> float:
    for i, m in enumerate(msgs):
        changes[layout.message_path(git, seq + i, m["role"], m["id"])] = to_json_bytes(m)
    changes[record_path] = to_json_bytes(record)
    start = time.perf_counter()
    git.write_checkpoint(changes, summary=f"{kind} of run {record['run_id'][:8]}", kind=kind,
                         run_id=record["run_id"], message_index=seq, sync_index=False)
    return time.perf_counter() - start


def agno_python() -> tuple[Path | None, str]:
    """The throwaway venv's python with agno installed (made once), or why there is none."""
    python = AGNO_VENV / "bin" / "python"
    check = [str(python), "-c", "import agno.agent, agno.db.sqlite; "
             "from importlib.metadata import version; print(version('agno'))"]
    ok = python.exists() and subprocess.run(check, capture_output=True, text=True)
    if ok and ok.returncode == 0 and ok.stdout.strip() == AGNO.split("==")[1]:
        return python, ""
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(AGNO_VENV)], check=True,
                           capture_output=True, text=True)
        # sqlalchemy's asyncio extra (greenlet): agno's sqlite module imports its async twin.
        subprocess.run([str(python), "-m", "pip", "install", "-q", AGNO, "sqlalchemy[asyncio]"],
                       check=True, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        return None, f"could not install {AGNO} into {AGNO_VENV}: {detail.strip()[-300:]}"
    ok = subprocess.run(check, capture_output=True, text=True)
    if ok.returncode != 0:
        return None, f"{AGNO} installed but does not import: {ok.stderr.strip()[-300:]}"
    return python, ""


class AgnoSide:
    """One agno session in its own process (bench/agno_side.py), driven line by line."""

    def __init__(self, python: Path, folder: Path) -> None:
        folder.mkdir(parents=True)
        self.proc = subprocess.Popen(
            [str(python), str(Path(__file__).with_name("agno_side.py")), str(folder)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def runs(self, n: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"runs": n}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("agno's side ended (see its error above)")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def bench_agno(root: Path, free: Path | None) -> None:
    """Braid and agno on the same disk, and Braid again in `free` (a tmpfs: its syncs cost
    nothing there, what is left is Braid's own work), interleaved."""
    python, why = agno_python()
    sides: dict[int, tuple[GitSession, AgnoSide | None, GitSession | None]] = {}
    meta = {"title": "bench", "user_id": "local", "created_at": now_iso()}
    ours: dict[int, list[float]] = {n: [] for n in RUN_LENGTHS}
    theirs: dict[int, list[float]] = {n: [] for n in RUN_LENGTHS}
    freed: dict[int, list[float]] = {n: [] for n in RUN_LENGTHS}
    try:
        for n in RUN_LENGTHS:
            made: list[GitSession | None] = []
            for where in (root, free):
                if where is None:
                    made.append(None)
                    continue
                git = GitSession.create(where / f"runs{n}", {"session_id": f"{n:032x}", **meta})
                for i in range(n - 1):
                    braid_run(git, i)
                made.append(git)
            agno = AgnoSide(python, root / f"agno{n}") if python else None
            if agno is not None:
                agno.runs(n - 1)
            assert made[0] is not None
            sides[n] = (made[0], agno, made[1])
        for i in range(SAMPLES):
            for n, (git, agno, in_free) in sides.items():
                # Who goes first alternates: the one after a write pays for its writeback.
                first, second = (agno, None) if i % 2 else (None, agno)
                _agno_run(first, theirs[n])
                ours[n].append(sum(braid_run(git, n + i)) / (BATCHES + 1))
                _agno_run(second, theirs[n])
                if in_free is not None:
                    freed[n].append(sum(braid_run(in_free, n + i)) / (BATCHES + 1))
    finally:
        for _, agno, _ in sides.values():
            if agno is not None:
                agno.close()
    _print_agno(ours, theirs if python is not None else None, why, freed if free else None)


def _agno_run(agno: AgnoSide | None, into: list[float]) -> None:
    if agno is not None:
        into.append(sum(agno.runs(1)["ms"][0]) / (BATCHES + 1))


def _print_agno(ours: dict[int, list[float]], theirs: dict[int, list[float]] | None,
                why: str, freed: dict[int, list[float]] | None) -> None:
    print(f"\n3. A checkpoint side by side with {AGNO} (SqliteDb, checkpoint=\"tool-batch\"),"
          f" per checkpoint: 5 tool batches of 2 KB and an answer, median of {SAMPLES} runs")
    if theirs is None:
        print(f"   agno not measured: {why}")
        print(f"   {'run':>8} {'Braid ms':>10} {'agno (issue 9) ms':>18}")
        for n in RUN_LENGTHS:
            print(f"   {n:>8,} {statistics.median(ours[n]):10.2f} {ISSUE_AGNO_MS:>18}")
        return
    extra = f" {'Braid, tmpfs':>13} {'tmpfs/agno':>11}" if freed else ""
    print(f"   {'run':>8} {'Braid ms':>10} {'agno ms':>10} {'Braid/agno':>11}{extra}")
    for n in RUN_LENGTHS:
        mine, its = statistics.median(ours[n]), statistics.median(theirs[n])
        line = f"   {n:>8,} {mine:10.2f} {its:10.2f} {mine / its:11.2f}"
        if freed:
            floor = statistics.median(freed[n])
            line += f" {floor:13.2f} {floor / its:11.2f}"
        print(line)
    print("   (Braid: its 6 commits and its one index flush; agno: 5 checkpoint_run calls "
          "and cleanup_and_store)")
    if freed:
        print("   (Braid, tmpfs: the same checkpoints in a tmpfs, interleaved, where a sync "
              "costs nothing: Braid's own work, against agno on the disk)")
    worst = max(statistics.median(ours[n]) / statistics.median(theirs[n]) for n in RUN_LENGTHS)
    print(f"   target (issue 30): Braid <= 0.5x agno at every run length: "
          f"{'holds' if worst <= 0.5 else 'misses'} (worst {worst:.2f}x)")


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
    if os.environ.get("BENCH_AGNO", "1") != "0":
        shm = Path(os.environ.get("BENCH_TMPFS", "/dev/shm"))
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(
                dir=shm if shm.is_dir() else None) as free:
            bench_agno(Path(tmp), Path(free) if shm.is_dir() else None)


if __name__ == "__main__":
    main()
