"""The whole turn, the disk, the page and time travel as the session grows (issue 9).

Every figure is measured through the real server (`braid serve` in a subprocess: HTTP in, the
real openai client against the embedded demo model inside), side by side in one run:

  1. a one-file turn (`POST /api/sessions/{id}/runs`) at turn 10, 1,000 and 5,000, turns of
     the sessions interleaved; bytes of new objects per checkpoint; `.git` per turn once
     packed while idle;
  2. the same turn with 100 and 100,000 files in `workdir/` (nested, ~1 KB each); the first
     snapshot of those files next to `git add -A && git commit` on a copy of the same tree;
     a user's edit to one of them found as `user-edit` before the next turn;
  3. the session page `GET /s/{id}` (bytes, time), `list_checkpoints`, `continue_run` from
     run 10, and `fork_session` at 5,000 turns and at 500.

Long sessions are built quickly by writing their history directly through the core
(`GitSession`, two checkpoints per turn as a real one-file turn writes them: the same
message files, run records and commits, without the model calls); everything measured goes
through HTTP. Sizes: BENCH_TURNS=10,1000,5000 BENCH_FILES=100000.

The turn's split: at 1,000 and 5,000 turns the model is sent the default context budget's
window (BRAID_CONTEXT_TOKENS, 32k tokens: ~2,300 messages, ~220 KB of JSON), twice a turn.
Reading that request is the model's own work; "of which the model" is the embedded demo
model's handling of the very request the next call of that session sends (built by the
server's own code: the window the budget keeps, shaped and encoded), timed in this process
through the demo model's ASGI app; the rest of the turn is Braid's.

Run: .venv/bin/python bench/turn.py
"""

from __future__ import annotations

import asyncio
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
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.agent.compaction.request import SYSTEM_PROMPT  # noqa: E402
from server.agent.tools import Workspace  # noqa: E402
from server.app.memory import SERVER_ENV  # noqa: E402
from server.base.ids import new_message_id, new_session_id, now_iso  # noqa: E402
from server.base.records import to_json_bytes  # noqa: E402
from server.base.settings import Settings  # noqa: E402
from server.git.packing import pack_now  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.git.workdir.staging import DISK  # noqa: E402
from server.model import body as model_body  # noqa: E402
from server.model.client import ModelClient  # noqa: E402
from server.model.demo import create_demo_app  # noqa: E402
from server.model.messages import to_model  # noqa: E402
from server.store import context, layout  # noqa: E402

TOKEN = "bench-token-0123456789"
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "15"))
LENGTHS = [int(n) for n in os.environ.get("BENCH_TURNS", "10,1000,5000").split(",")]
BIG = int(os.environ.get("BENCH_FILES", "100000"))


# -- building sessions through the core --------------------------------------------------


def message(role: str, run_id: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
            "created_at": now_iso(), **extra}


def written_turn(git: GitSession, sid: str, turn: int) -> None:
    """What a one-file turn writes: a `tool-batch` and a `turn` checkpoint."""
    run_id = new_message_id()
    seq = layout.next_seq(git)
    record_path = layout.new_run_path(git, run_id)
    call = {"id": f"call_{turn}", "type": "function",
            "function": {"name": "write_file",
                         "arguments": json.dumps({"path": f"f{turn % 50}.txt",
                                                  "content": f"turn {turn}\n"})}}
    batch = [message("user", run_id, f"write f{turn % 50}.txt turn {turn}"),
             message("assistant", run_id, None, tool_calls=[call]),
             message("tool", run_id, "wrote 8 bytes", tool_call_id=call["id"],
                     name="write_file")]
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
    target = git.path / "workdir" / f"f{turn % 50}.txt"
    target.write_text(f"turn {turn}\n")
    changes[f"workdir/f{turn % 50}.txt"] = DISK
    git.write_checkpoint(changes, summary=f"Tools: write_file f{turn % 50}.txt",
                         kind="tool-batch", run_id=run_id, message_index=3, sync_index=False)
    final = message("assistant", run_id, f"done: wrote f{turn % 50}.txt")
    record.update(status="COMPLETED", message_count=4)
    final_path = layout.message_path(git, seq, "assistant", final["id"])
    git.write_checkpoint({final_path: to_json_bytes(final), record_path: to_json_bytes(record)},
                         summary=f"Turn: write f{turn % 50}.txt", kind="turn", run_id=run_id,
                         message_index=4, sync_index=False)


def build_session(data: Path, turns: int, title: str) -> str:
    sid = new_session_id()
    meta = {"session_id": sid, "title": title, "user_id": "local", "created_at": now_iso(),
            "forked_from_session_id": None, "root_session_id": sid}
    git = GitSession.create(data / "sessions" / sid, meta)
    for turn in range(turns):
        written_turn(git, sid, turn)
    # The index as HEAD has it, then refreshed by git (one pass, not an insert per file).
    git.index.reset()
    subprocess.run(["git", "-C", str(git.path), "update-index", "-q", "--refresh"],
                   capture_output=True)
    pack_now(git.path)  # as the idle packer leaves a session at rest
    return sid


def fill_workdir(folder: Path, n: int) -> None:
    """n files of ~1 KB in nested folders (100 per folder)."""
    for i in range(n):
        d = folder / f"pkg{i // 10000:02d}" / f"mod{i // 100 % 100:02d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i:06d}.py").write_text(f"# file {i}\n" + "x = 1\n" * 165)


# -- the server ---------------------------------------------------------------------------


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

    def call(self, method: str, path: str, body: Any = None) -> tuple[float, int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Cookie", f"braid_token={TOKEN}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=600) as res:
                raw, status = res.read(), res.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        return time.perf_counter() - start, status, raw

    def json(self, method: str, path: str, body: Any = None) -> tuple[float, Any]:
        elapsed, status, raw = self.call(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {raw[:300]!r}")
        return elapsed, json.loads(raw or b"null")

    def turn(self, sid: str, text: str) -> tuple[float, dict[str, Any]]:
        elapsed, run = self.json("POST", f"/api/sessions/{sid}/runs", {"input": text})
        assert run["status"] == "COMPLETED", run
        return elapsed, run

    def ws_checkout(self, sid: str, ref: str) -> None:
        from websockets.sync.client import connect

        with connect(f"ws://127.0.0.1:{self.port}/ws/sessions/{sid}?format=json",
                     additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
            ws.send(json.dumps({"action": "checkout", "ref": ref, "request_id": "c"}))
            while True:
                frame = json.loads(ws.recv(timeout=60))
                if frame.get("type") in ("result", "error") and frame.get("request_id") == "c":
                    assert frame["type"] == "result", frame
                    return

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


# -- measuring ----------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f}"


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


def loose_bytes(git_dir: Path) -> int:
    total = 0
    objects = git_dir / "objects"
    for entry in os.scandir(objects):
        if len(entry.name) == 2 and entry.is_dir():
            total += sum(e.stat().st_size for e in os.scandir(entry.path))
    return total


def commit_count(folder: Path) -> int:
    out = subprocess.run(["git", "-C", str(folder), "rev-list", "--count", "--all"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def row(label: str, *cells: str) -> None:
    print(f"   {label:<52}" + "".join(f"{c:>12}" for c in cells))


def next_request(data: Path, sid: str) -> bytes:
    """The body the session's next model call sends, made by the server's own code."""
    git = GitSession(data / "sessions" / sid)
    turn = [{"id": new_message_id(), "role": "user", "content": "write n0.txt next"}]
    system = context.estimate({"content": SYSTEM_PROMPT})
    budget = Settings.from_env().context_tokens  # as the server reads it
    sent, used = context.fit((layout.messages(git), turn), budget, system,
                             layout.message_sums(git))
    out = to_model(sent, SYSTEM_PROMPT)
    if used["omitted_messages"]:
        out.insert(1, {"role": "system", "content": context.note_text(used["omitted_messages"])})
    client = ModelClient(Settings.from_env({**os.environ, "BRAID_MODEL": "demo"}))
    endpoint, model = client.resolve()
    fields = client._request(endpoint, model, Workspace.schemas(False), None)
    return model_body.body(fields, out)


def model_ms(body: bytes) -> float:
    """The demo model's handling of `body`: its JSON read, its reply, the stream sent."""
    app = create_demo_app()
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [],
             "root_path": ""}

    async def once() -> float:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            pass

        start = time.perf_counter()
        await app(scope, receive, send)
        return time.perf_counter() - start

    return median([asyncio.run(once()) for _ in range(max(5, SAMPLES))])


def lengths_section(srv: Server, data: Path, sids: dict[int, str]) -> dict[int, float]:
    times: dict[int, list[float]] = {n: [] for n in sids}
    per_ckpt: dict[int, list[float]] = {n: [] for n in sids}
    for i in range(SAMPLES):
        for n, sid in sids.items():
            folder = data / "sessions" / sid
            before, commits = loose_bytes(folder / ".git"), commit_count(folder)
            elapsed, _ = srv.turn(sid, f"write n{i % 20}.txt sample {i} of {n}")
            times[n].append(elapsed)
            made = commit_count(folder) - commits
            per_ckpt[n].append((loose_bytes(folder / ".git") - before) / max(made, 1))
    base = median(times[min(sids)])
    # Two model calls a turn (the tool batch, then the answer), each about this request.
    model = {n: 2 * model_ms(next_request(data, sid)) for n, sid in sids.items()}
    print("\n1. A one-file turn through HTTP as the session grows "
          f"(median of {SAMPLES}, interleaved)\n")
    row("turn", "ms", "x turn 10", "KB/ckpt", "model ms", "Braid ms", "Braid x")
    braid_base = base - model[min(sids)]
    for n in sids:
        turn = median(times[n])
        row(f"at turn {n:,}", ms(turn), f"{turn / base:9.2f}",
            f"{median(per_ckpt[n]) / 1024:9.1f}", ms(model[n]), ms(turn - model[n]),
            f"{(turn - model[n]) / braid_base:9.2f}")
    print("   (model ms: the demo model reading and answering the two requests of the turn, "
          "~2,300 messages of the 32k-token window at 1,000 turns and more; Braid ms: the rest)")
    return {n: median(times[n]) for n in sids}


def packing_section(srv: Server, data: Path, sid: str, turns: int) -> None:
    folder = data / "sessions" / sid
    deadline = time.monotonic() + 60
    # The server packs an idle session in the background: wait for it to settle.
    while time.monotonic() < deadline and loose_bytes(folder / ".git") > 1_000_000:
        time.sleep(0.5)
    time.sleep(3)
    size = tree_bytes(folder / ".git")
    print(f"\n   .git of the {turns:,}-turn session once idle: {size / 1e6:.2f} MB "
          f"({size / turns / 1024:.1f} KB per turn)")


def big_workdir_section(srv: Server, data: Path, tmp: Path) -> None:
    sids = {}
    for n in (100, BIG):
        _, made = srv.json("POST", "/api/sessions", {"title": f"{n} files"})
        sids[n] = made["session_id"]
        fill_workdir(data / "sessions" / made["session_id"] / "workdir", n)
    print(f"\n2. Big workdirs: 100 vs {BIG:,} files (nested, ~1 KB)\n")
    row("", "ms")
    for n, sid in sids.items():
        elapsed, _ = srv.turn(sid, "say first")
        row(f"first turn, snapshotting {n:,} user files", ms(elapsed))
        copy = tmp / f"copy{n}"
        subprocess.run(["git", "init", "-q", str(copy)], check=True)
        shutil.copytree(data / "sessions" / sid / "workdir", copy / "workdir")
        start = time.perf_counter()
        # gc.auto=0: a detached auto-gc would still be writing into the copy when it goes.
        subprocess.run(f"git -C {copy} add -A && git -C {copy} -c gc.auto=0 -c user.name=b "
                       f"-c user.email=b@b commit -qm snap", shell=True, check=True)
        row(f"   git add -A && git commit on the same {n:,} files",
            ms(time.perf_counter() - start))
        shutil.rmtree(copy, ignore_errors=True)
    times: dict[int, list[float]] = {n: [] for n in sids}
    for i in range(SAMPLES):
        for n, sid in sids.items():
            elapsed, _ = srv.turn(sid, f"write pkg00/mod00/new{i % 5}.py v = {i}")
            times[n].append(elapsed)
    base = median(times[100])
    for n in sids:
        row(f"one-file turn with {n:,} files (x 100 files)", ms(median(times[n])),
            f"{median(times[n]) / base:9.2f}")
    sid = sids[BIG]
    n = BIG // 2
    rel = f"pkg{n // 10000:02d}/mod{n // 100 % 100:02d}/file{n:06d}.py"
    edited = data / "sessions" / sid / "workdir" / rel
    if edited.exists():
        edited.write_text("# edited by the user\n")
        srv.turn(sid, "say after the edit")
        log = subprocess.run(["git", "-C", str(data / "sessions" / sid), "log", "-3",
                              "--format=%s", "--name-only"], capture_output=True, text=True,
                             check=True).stdout
        found = f"workdir/{rel}" in log and "User edits" in log
        status = subprocess.run(["git", "-C", str(data / "sessions" / sid), "status",
                                 "--porcelain"], capture_output=True, text=True).stdout
        print(f"   a user's edit to one of {BIG:,} files committed as user-edit: "
              f"{'yes' if found else 'NO'}; git status clean: {'yes' if not status else 'NO'}")


def time_travel_section(srv: Server, data: Path, sid: str, turns: int, small: str) -> None:
    _, info = srv.json("GET", f"/api/sessions/{sid}")
    runs = sorted(info["runs"], key=lambda r: r["created_at"])
    early, last = runs[10]["run_id"], runs[-1]["run_id"]
    pages, page_bytes, lists, conts, forks, small_forks = [], 0, [], [], [], []
    srv.call("GET", f"/s/{small}")  # the server's first page compiles the templates, once
    for i in range(max(3, SAMPLES // 3)):
        if i:  # back on main, as the user left it
            srv.ws_checkout(sid, "main")
        elapsed, status, raw = srv.call("GET", f"/s/{sid}")
        assert status == 200, status
        pages.append(elapsed)
        page_bytes = len(raw)
        for run_id in (early, last):
            elapsed, _ = srv.json("GET", f"/api/runs/{run_id}/checkpoints?session_id={sid}")
            lists.append(elapsed)
        # Forked while main (all the turns) is checked out: a continue moves HEAD.
        elapsed, _ = srv.json("POST", f"/api/sessions/{sid}/fork")
        forks.append(elapsed)
        elapsed, _ = srv.json("POST", f"/api/runs/{early}/continue",
                              {"session_id": sid, "continue_from": "end", "input": "say hi"})
        conts.append(elapsed)
        elapsed, _ = srv.json("POST", f"/api/sessions/{small}/fork")
        small_forks.append(elapsed)
    print(f"\n3. The page and time travel at {turns:,} turns\n")
    row("", "ms", "KB")
    row("session page GET /s/{id}", ms(median(pages)), f"{page_bytes / 1024:9.1f}")
    row("list_checkpoints (run 10 and the last run)", ms(median(lists)))
    row("continue_run from run 10 (a sibling run, whole turn)", ms(median(conts)))
    row(f"fork_session of the {turns:,}-turn session", ms(median(forks)))
    row("fork_session of a 500-turn session", ms(median(small_forks)))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="braid-bench-") as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "data"
        start = time.perf_counter()
        sids = {n: build_session(data, n - 1, f"{n} turns") for n in LENGTHS}
        small = build_session(data, 500, "500 turns")
        print(f"Turn benchmark (built {sum(LENGTHS) + 500:,} turns through the core in "
              f"{time.perf_counter() - start:.0f} s; everything below through HTTP)")
        srv = Server(data)
        try:
            for sid in sids.values():  # each session's first turn opens it (a full scan)
                srv.turn(sid, "say warm up")
            times = lengths_section(srv, data, sids)
            mid = sorted(sids)[len(sids) // 2]
            packing_section(srv, data, sids[mid], mid)
            big_workdir_section(srv, data, tmp)
            longest = max(sids)
            time_travel_section(srv, data, sids[longest], longest, small)
            base = times[min(sids)]
            print("\nTargets: turn at 1,000 <= 1.2x and at 5,000 <= 1.3x turn 10: "
                  + ", ".join(f"{n:,}: {times[n] / base:.2f}x" for n in sids))
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
