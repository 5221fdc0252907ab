"""Fork-session cost: Braid's fork (hard-linked objects, a `fork` commit per branch, the
working tree copied: session.json and workdir/, history/ and runs/ being off disk) next to a
plain copy of the session folder, for a session with 500 turns, loose and once packed.

Each simulated turn is what a tool-using turn writes: a `tool-batch` checkpoint (user message,
assistant tool call, tool result, one workdir file) and a `turn` checkpoint (final answer, run
record). The workdir holds 200 files of 4 KB besides. Prints medians measured side by side.

Run: .venv/bin/python bench/fork.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.base.ids import new_message_id, new_session_id, now_iso  # noqa: E402
from server.base.records import to_json_bytes  # noqa: E402
from server.features.fork import clone_session  # noqa: E402
from server.git.history import (
    history_path,  # noqa: E402
    run_path,  # noqa: E402
)
from server.git.packing import pack_now  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.git.workdir.staging import DISK  # noqa: E402
from server.store import layout  # noqa: E402

TURNS = 500
WORKDIR_FILES = 200
SAMPLES = 7


def message(role: str, run_id: str, content: str | None, **extra: object) -> dict[str, object]:
    return {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
            "created_at": now_iso(), **extra}


def simulated_turn(git: GitSession, turn: int) -> None:
    run_id = new_message_id()
    seq = layout.next_seq(git)
    record_path = run_path(layout.run_count(git), run_id)
    call = {"id": f"call_{turn}", "type": "function",
            "function": {"name": "write_file", "arguments": '{"path": "f.txt"}'}}
    batch = [message("user", run_id, f"write f{turn % 50}.txt turn {turn}"),
             message("assistant", run_id, None, tool_calls=[call]),
             message("tool", run_id, "wrote 8 bytes", tool_call_id=call["id"])]
    batch[1]["id"] = run_id
    changes: dict[str, object] = {}
    for msg in batch:
        changes[history_path(seq, str(msg["role"]), str(msg["id"]))] = to_json_bytes(msg)
        seq += 1
    record = {"run_id": run_id, "status": "RUNNING", "created_at": now_iso()}
    changes[record_path] = to_json_bytes(record)
    target = git.path / "workdir" / f"f{turn % 50}.txt"
    target.write_text(f"turn {turn}\n")
    changes[f"workdir/f{turn % 50}.txt"] = DISK
    git.write_checkpoint(changes, summary=f"Tools: turn {turn}", kind="tool-batch",
                         run_id=run_id, message_index=3, sync_index=False)
    final = message("assistant", run_id, f"done: wrote f{turn % 50}.txt")
    record["status"] = "COMPLETED"
    git.write_checkpoint({history_path(seq, "assistant", str(final["id"])): to_json_bytes(final),
                          record_path: to_json_bytes(record)},
                         summary=f"Turn {turn}", kind="turn", run_id=run_id, message_index=4,
                         sync_index=False)


def build(root: Path) -> GitSession:
    meta = {"session_id": new_session_id(), "title": "bench", "user_id": "local",
            "created_at": now_iso(), "forked_from_session_id": None}
    meta["root_session_id"] = meta["session_id"]
    git = GitSession.create(root / "source", meta)
    seed = {}
    for i in range(WORKDIR_FILES):
        rel = f"workdir/src/d{i % 10}/file{i}.txt"
        seed[rel] = (f"line {i}\n" * 512).encode()
    git.write_checkpoint(seed, summary="seed files", kind="user-edit")
    for turn in range(TURNS):
        simulated_turn(git, turn)
    git.index.flush()
    return git


def size_of(path: Path) -> tuple[int, int]:
    files = total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            files += 1
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return files, total


def fork_once(git: GitSession, root: Path, i: int) -> float:
    meta = {"session_id": new_session_id(), "title": "bench", "user_id": "local",
            "created_at": now_iso(), "forked_from_session_id": "s" * 32,
            "root_session_id": "s" * 32}
    target = root / f"fork{i}"
    start = time.perf_counter()
    clone_session(git, target, meta)
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return elapsed


def copy_once(git: GitSession, root: Path, i: int) -> float:
    target = root / f"copy{i}"
    start = time.perf_counter()
    shutil.copytree(git.path, target, symlinks=True)
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        git = build(root)
        files, total = size_of(git.path)
        objects, object_bytes = size_of(git.path / ".git" / "objects")
        on_disk = sum(1 for p in git.path.rglob("*") if p.is_file() and ".git" not in p.parts)
        loose = [fork_once(git, root, i) for i in range(SAMPLES)]
        copies = [copy_once(git, root, i) for i in range(SAMPLES)]
        pack_now(git.path)  # as the idle packer leaves a session at rest
        packed_objects, _ = size_of(git.path / ".git" / "objects")
        packed = [fork_once(git, root, i) for i in range(SAMPLES)]
    fork_ms = statistics.median(loose) * 1000
    copy_ms = statistics.median(copies) * 1000
    packed_ms = statistics.median(packed) * 1000
    print(f"Fork-session benchmark: {TURNS} turns, {WORKDIR_FILES} workdir files "
          f"(median of {SAMPLES})\n")
    print(f"   session folder: {files:,} files, {total / 1e6:.1f} MB "
          f"({objects:,} object files, {object_bytes / 1e6:.1f} MB; "
          f"{on_disk:,} files in the working tree)\n")
    print(f"   {'method':<52} {'ms':>10}")
    print(f"   {'Braid fork, loose objects (hard-linked + workdir copy)':<52} {fork_ms:>10.1f}")
    print(f"   {f'Braid fork, packed ({packed_objects} object files)':<52} {packed_ms:>10.1f}")
    print(f"   {'plain copy of the session folder (loose)':<52} {copy_ms:>10.1f}")
    print(f"\n   the fork takes {fork_ms / copy_ms:.2f}x the time of a plain copy "
          f"({copy_ms / fork_ms:.1f}x faster); packed: {packed_ms:.0f} ms (target <= 100 ms)")


if __name__ == "__main__":
    main()
