"""What a long session's model call is sent, and the whole turn, with masking and compaction
next to today's drop-oldest (issue 33), side by side in one run.

Sessions of 100, 1,000 and 5,000 turns are built through the core (each turn: a user message,
a `read_file` call, its ~1,600-byte result, an answer; two checkpoints, as a real turn writes
them). For each:

  1. the next call's request, made by the server's own code in this process, three ways:
     drop-oldest (the newest messages that fit, the rest left out with a note: before issue
     33), masking only (old tool results replaced by a marker, then drop-oldest), and after
     the compaction the server made (the summary, then the newest turns): estimated tokens,
     JSON bytes, and the time to make it (median of 9 after one warm-up: the per-message
     work is kept between calls, as in a live server);
  2. the whole turn through HTTP (`braid serve`, the embedded demo model): the first turn
     (which compacts: a summary request, then the turn) and the median of the turns after.

The budget is BRAID_CONTEXT_TOKENS (default 32,000). Run: .venv/bin/python bench/context.py
(BENCH_TURNS=100,1000,5000 BENCH_SAMPLES=9)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.agent.compaction import request as compaction  # noqa: E402
from server.agent.compaction.request import SYSTEM_PROMPT  # noqa: E402
from server.agent.tools import Workspace  # noqa: E402
from server.base.ids import new_message_id, new_session_id, now_iso  # noqa: E402
from server.base.records import to_json_bytes  # noqa: E402
from server.git.packing import pack_now  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.git.workdir.staging import DISK  # noqa: E402
from server.model import body as model_body  # noqa: E402
from server.model.messages import to_model  # noqa: E402
from server.store import context, layout  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_turn", ROOT / "bench" / "turn.py")
assert _spec is not None and _spec.loader is not None
bench_turn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_turn)

LENGTHS = [int(n) for n in os.environ.get("BENCH_TURNS", "100,1000,5000").split(",")]
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "9"))
BUDGET = int(os.environ.get("BRAID_CONTEXT_TOKENS", "32000"))
OUTPUT = ("line of the file being read, as a tool would return it\n" * 30)[:1600]


def message(role: str, run_id: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
            "created_at": now_iso(), **extra}


def written_turn(git: GitSession, sid: str, turn: int) -> None:
    """A read turn: its `tool-batch` and `turn` checkpoints, as a real one writes them."""
    run_id = new_message_id()
    seq = layout.next_seq(git)
    record_path = layout.new_run_path(git, run_id)
    name = f"f{turn % 50}.txt"
    call = {"id": f"call_{turn}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": name})}}
    batch = [message("user", run_id, f"read {name} (turn {turn})"),
             message("assistant", run_id, "", tool_calls=[call]),
             message("tool", run_id, OUTPUT, tool_call_id=call["id"], name="read_file")]
    batch[1]["id"] = run_id
    changes: dict[str, Any] = {}
    for msg in batch:
        changes[layout.message_path(git, seq, msg["role"], msg["id"])] = to_json_bytes(msg)
        seq += 1
    now = now_iso()
    record = {"run_id": run_id, "session_id": sid, "status": "RUNNING", "branch": "main",
              "model": "demo", "usage": {}, "created_at": now, "updated_at": now,
              "forked_from_run_id": None, "forked_from_message_index": None,
              "regenerated_from": None, "error": None, "message_count": 3,
              "parent_run_id": None}
    changes[record_path] = to_json_bytes(record)
    if turn < 50:
        (git.path / "workdir" / name).write_text(OUTPUT)
        changes[f"workdir/{name}"] = DISK
    git.write_checkpoint(changes, summary=f"Tools: read_file {name}", kind="tool-batch",
                         run_id=run_id, message_index=3, sync_index=False)
    final = message("assistant", run_id, f"done: read {name}")
    record.update(status="COMPLETED", message_count=4)
    git.write_checkpoint({layout.message_path(git, seq, "assistant", final["id"]):
                          to_json_bytes(final), record_path: to_json_bytes(record)},
                         summary=f"Turn: read {name}", kind="turn", run_id=run_id,
                         message_index=4, sync_index=False)


def build_session(data: Path, turns: int) -> str:
    sid = new_session_id()
    meta = {"session_id": sid, "title": f"{turns} turns", "user_id": "local",
            "created_at": now_iso(), "forked_from_session_id": None, "root_session_id": sid}
    git = GitSession.create(data / "sessions" / sid, meta)
    for turn in range(turns):
        written_turn(git, sid, turn)
    git.index.reset()
    os.system(f"git -C {git.path} update-index -q --refresh >/dev/null 2>&1")  # noqa: S605
    pack_now(git.path)
    return sid


TOOLS = Workspace.schemas(False)


def drop_oldest(git: GitSession, turn: list[Any]) -> list[Any]:
    """The request as it was made before issue 33: the newest that fit, a note."""
    sent, used = context.fit((layout.messages(git), turn), BUDGET,
                             context.text_cost(SYSTEM_PROMPT), layout.message_sums(git))
    out = to_model(sent, SYSTEM_PROMPT)
    if used["omitted_messages"]:
        out.insert(1, {"role": "system", "content": context.note_text(used["omitted_messages"])})
    return out


def windowed(git: GitSession, turn: list[Any]) -> list[Any]:
    """The request as it is made now: instructions, a summary if any, masking, a note."""
    return compaction.build(layout.messages(git), layout.window_sums(git), turn,
                            [SYSTEM_PROMPT], BUDGET, 0).messages


def measure(git: GitSession, make: Callable[[GitSession, list[Any]], list[Any]]
            ) -> tuple[int, int, float]:
    """(estimated tokens, JSON bytes, median ms to make it) of the next call's request."""
    turn = [message("user", "next", "read f1.txt again")]
    make(git, turn)  # warm-up: the per-message work is kept between calls
    times = []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        out = make(git, turn)
        times.append(time.perf_counter() - start)
    encoded = model_body.body({"model": "demo", "stream": True}, out)
    tokens = sum(context.text_cost(str(m.get("content") or "")) for m in out)
    return tokens, len(encoded), statistics.median(times) * 1000


def row(label: str, *cells: str) -> None:
    print(f"   {label:<26}" + "".join(f"{c:>13}" for c in cells))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="braid-bench-context-"))
    data = tmp / "data"
    try:
        print(f"building sessions of {', '.join(f'{n:,}' for n in LENGTHS)} turns ...",
              flush=True)
        sids = {n: build_session(data, n) for n in LENGTHS}
        before: dict[int, tuple[tuple[int, int, float], tuple[int, int, float]]] = {}
        for n, sid in sids.items():
            git = GitSession(data / "sessions" / sid)
            before[n] = (measure(git, drop_oldest), measure(git, windowed))

        srv = bench_turn.Server(data)
        first: dict[int, float] = {}
        turns: dict[int, list[float]] = {n: [] for n in LENGTHS}
        try:
            for n, sid in sids.items():
                first[n], run = srv.turn(sid, "read f1.txt")
                assert any(True for _ in [run]), run
            for i in range(SAMPLES):
                for n, sid in sids.items():
                    elapsed, _ = srv.turn(sid, f"read f{i % 50}.txt")
                    turns[n].append(elapsed)
        finally:
            srv.stop()
        after = {n: measure(GitSession(data / "sessions" / sid), windowed)
                 for n, sid in sids.items()}

        print(f"\n1. The next call's request (budget {BUDGET:,} tokens; median of {SAMPLES} "
              "after a warm-up)\n")
        row("", "tokens", "KB", "ms to make")
        for n in LENGTHS:
            (d_tok, d_b, d_ms), (m_tok, m_b, m_ms) = before[n]
            c_tok, c_b, c_ms = after[n]
            print(f"   at turn {n:,}")
            row("  drop-oldest (before)", f"{d_tok:,}", f"{d_b / 1024:.0f}", f"{d_ms:.2f}")
            row("  masking only", f"{m_tok:,}", f"{m_b / 1024:.0f}", f"{m_ms:.2f}")
            row("  summary + masking", f"{c_tok:,}", f"{c_b / 1024:.0f}", f"{c_ms:.2f}")

        print(f"\n2. The whole turn through HTTP (median of {SAMPLES}, sessions interleaved)\n")
        row("", "first (ms)", "then (ms)", "x 1,000")
        base = statistics.median(turns[1000]) if 1000 in turns else None
        for n in LENGTHS:
            med = statistics.median(turns[n])
            ratio = f"{med / base:.2f}" if base else "-"
            row(f"at turn {n:,}", f"{first[n] * 1000:.0f}", f"{med * 1000:.0f}", ratio)
        print("   (first: the turn that compacts: the summary request, its commit, then the "
              "turn; then: the turns after it)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
