"""The agent branches itself (issue 25): the model's `spawn_sub_agents` against the user's
**Spawn sub-agent**, through the real server (`braid serve` in a subprocess, the embedded
demo model), side by side in one run:

  1. wall time of four children, each writing one file and answering slowly (the demo
     model's `slow`, so the work is not zero): spawned by the model in one
     `spawn_sub_agents` call (`POST /api/sessions/{id}/runs`, the turn to its end), against
     the same four spawned one after another by the user's action
     (`spawn_sub_agent` over the socket, each to its end); target: ≤ 0.5×;
  2. at a 1,000-turn parent (its history written through the core, as bench/turn.py
     builds it), the time from the spawn call (its `tool_call` event) to each child's first
     model request, seen as the child's first streamed chunk (`message_delta`: the demo
     model answers at once, so this is an upper bound); target: ≤ 50 ms.

Run: .venv/bin/python bench/orchestration.py   (BENCH_SAMPLES=5 BENCH_SLOW_MS=40)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from turn import TOKEN, Server, build_session, median  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "5"))
SLOW_MS = int(os.environ.get("BENCH_SLOW_MS", "40"))
CHILDREN = 4
PARENT_TURNS = int(os.environ.get("BENCH_PARENT_TURNS", "1000"))


def child_prompt(n: int) -> str:
    return f"write c{n}.txt child {n}\nslow {SLOW_MS}\nsay " + " ".join(["work"] * 10)


class Socket:
    def __init__(self, srv: Server, sid: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(f"ws://127.0.0.1:{srv.port}/ws/sessions/{sid}?format=json",
                          additional_headers={"Authorization": f"Bearer {TOKEN}"},
                          max_size=None)
        self.n = 0

    def call(self, action: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        rid = f"r{self.n}"
        self.ws.send(json.dumps({"action": action, "request_id": rid, **params}))
        while True:
            frame = json.loads(self.ws.recv(timeout=300))
            if frame.get("request_id") == rid and frame.get("type") in ("result", "error"):
                assert frame["type"] == "result", frame
                return dict(frame["data"])

    def frames(self, until: Any, timeout: float = 120) -> list[tuple[float, dict[str, Any]]]:
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            frame = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            seen.append((time.perf_counter(), frame))
            if until(frame):
                return seen

    def close(self) -> None:
        self.ws.close()


def by_model(srv: Server) -> float:
    _, sid = srv.json("POST", "/api/sessions", {})
    text = "\n".join(f"spawn c{n}: " + child_prompt(n).replace("\n", "\\n")
                     for n in range(CHILDREN))
    elapsed, run = srv.turn(sid["session_id"], text)
    agents = json.loads(next(m["content"] for m in run["messages"] if m["role"] == "tool"))
    assert [a["status"] for a in agents["agents"]] == ["COMPLETED"] * CHILDREN, agents
    return elapsed


def by_user(srv: Server) -> float:
    _, made = srv.json("POST", "/api/sessions", {})
    sid = made["session_id"]
    _, first = srv.turn(sid, "say ready")
    ws = Socket(srv, sid)
    try:
        start = time.perf_counter()
        for n in range(CHILDREN):
            out = ws.call("spawn_sub_agent", parent_turn_id=first["run_id"],
                          prompt=child_prompt(n), label=f"c{n}")
            assert out["status"] == "COMPLETED", out
        return time.perf_counter() - start
    finally:
        ws.close()


def to_first_request(srv: Server, sid: str) -> list[float]:
    """ms from the spawn call's `tool_call` event to each child's first chunk."""
    ws = Socket(srv, sid)
    try:
        text = "\n".join(f"spawn k{n}: say hello from {n}" for n in range(CHILDREN))
        run_id = ws.call("send_message", text=text)["run_id"]
        seen = ws.frames(lambda f: f.get("event") == "run_completed"
                         and f["data"]["run_id"] == run_id)
    finally:
        ws.close()
    call_at = next(t for t, f in seen if f.get("event") == "tool_call"
                   and f["data"]["call"]["function"]["name"] == "spawn_sub_agents")
    children = {f["data"]["run_id"] for _, f in seen if f.get("event") == "sub_agent_started"}
    first: dict[str, float] = {}
    for t, f in seen:
        rid = (f.get("data") or {}).get("run_id")
        if f.get("event") == "message_delta" and rid in children and rid not in first:
            first[rid] = t
    assert len(first) == CHILDREN, first
    return [(t - call_at) * 1000 for t in first.values()]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="braid-orch-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        big = build_session(data, PARENT_TURNS, f"{PARENT_TURNS} turns")
        srv = Server(data)
        try:
            model, user = [], []
            for _ in range(SAMPLES):  # interleaved, so both see the same machine
                model.append(by_model(srv))
                user.append(by_user(srv))
            firsts: list[float] = []
            for _ in range(SAMPLES):
                firsts += to_first_request(srv, big)
        finally:
            srv.stop()
    m, u = median(model), median(user)
    print(f"\nfour children, each one file (slow {SLOW_MS} ms), medians of {SAMPLES}")
    print(f"   {'':<52}{'median':>12}{'target':>12}")
    print(f"   {'spawned by the model (one spawn_sub_agents)':<52}{m * 1000:>10.0f}ms")
    print(f"   {'spawned by the user, one after another':<52}{u * 1000:>10.0f}ms")
    print(f"   {'ratio model / user':<52}{m / u:>11.2f}x{'<= 0.5x':>12}")
    print(f"\nspawn call -> each child's first model request, {PARENT_TURNS}-turn parent "
          f"({len(firsts)} children)")
    print(f"   {'median':<52}{median(firsts):>10.1f}ms{'<= 50 ms':>12}")
    print(f"   {'max':<52}{max(firsts):>10.1f}ms")


if __name__ == "__main__":
    main()
