"""The shell's sandbox (issue 31): a whole turn running one command, through the socket
(`send_message` in, `run_completed` out) against two real servers side by side, one with
BRAID_SHELL=sandbox and one with BRAID_SHELL=host, the samples interleaved so both see the
same machine. Commands: `true`, `python3 -c pass`, `ls -R` of 1,000 files; and a `say`
turn without the shell as the floor. Prints the medians and what the sandbox adds.

    .venv/bin/python bench/shell.py [--samples 30]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "shell-bench-token-0123456789"
COMMANDS = {
    "say (no shell)": "say ok",
    "shell true": "shell true\nsay ok",
    "shell python3 -c pass": "shell /usr/bin/python3 -c pass\nsay ok",
    "shell ls -R (1,000 files)": "shell ls -R tree > /dev/null\nsay ok",
}
MAKE_TREE = ("shell mkdir -p tree && cd tree && for d in $(seq 10); do mkdir -p d$d; "
             "for f in $(seq 100); do echo $f > d$d/f$f; done; done\nsay made")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(base: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as res:
        return json.loads(res.read() or b"null")


class Served:
    def __init__(self, mode: str, data: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONMALLOC": "malloc", "BRAID_SERVER_MALLOC": "1",
               "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo", "BRAID_SHELL": mode}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--port", str(self.port),
             "--data-dir", str(data)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.base + "/login", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.sid = http(self.base, "POST", "/api/sessions", {})["session_id"]
        http(self.base, "POST", f"/api/sessions/{self.sid}/runs", {"input": MAKE_TREE})
        from websockets.sync.client import connect
        self.ws = connect(f"ws://127.0.0.1:{self.port}/ws/sessions/{self.sid}?format=json",
                          additional_headers={"Authorization": f"Bearer {TOKEN}"})

    def turn_ms(self, text: str) -> float:
        t0 = time.perf_counter()
        self.ws.send(json.dumps({"action": "send_message", "request_id": "s", "text": text}))
        while True:
            frame = json.loads(self.ws.recv(timeout=300))
            if frame.get("event") in ("run_completed", "run_error"):
                break
        took = (time.perf_counter() - t0) * 1000
        if frame["event"] != "run_completed":
            raise RuntimeError(f"the turn failed: {frame}")
        return took

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(30)


def bare_ms(samples: int) -> tuple[float, float]:
    """`bash -c true` started the way each mode starts it, without a server: (host, sandbox)
    medians, interleaved. The sandbox side makes and removes its cgroup as the shell does."""
    sys.path.insert(0, str(ROOT))
    from server.agent.sandbox import box
    from server.agent.sandbox.limits import Cgroup, Limits

    host: list[float] = []
    boxed: list[float] = []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(samples):
            t0 = time.perf_counter()
            subprocess.run(["bash", "-c", "true"], cwd=work, check=True)
            host.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            group = Cgroup.make(Limits(), "bench")
            subprocess.run(box.sandboxed_argv(["bash", "-c", "true"], workdir=Path(work),
                                              env=box.base_env(), cgroup=group), check=True)
            if group is not None:
                group.close()
            boxed.append((time.perf_counter() - t0) * 1000)
    return statistics.median(host), statistics.median(boxed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Served("sandbox", Path(tmp) / "sandbox")
        host = Served("host", Path(tmp) / "host")
        try:
            results: dict[str, dict[str, list[float]]] = {}
            for name, text in COMMANDS.items():
                for served in (sandbox, host):  # warm up
                    served.turn_ms(text)
                times: dict[str, list[float]] = {"host": [], "sandbox": []}
                for _ in range(args.samples):
                    times["host"].append(host.turn_ms(text))
                    times["sandbox"].append(sandbox.turn_ms(text))
                results[name] = times
        finally:
            sandbox.close()
            host.close()
    bare = bare_ms(args.samples)
    print(f"{'turn':<28} {'host ms':>9} {'sandbox ms':>11} {'added ms':>9} {'ratio':>6}"
          f"   (median of {args.samples}, interleaved; whole turn through the socket)")
    for name, times in results.items():
        h, s = statistics.median(times["host"]), statistics.median(times["sandbox"])
        print(f"{name:<28} {h:>9.1f} {s:>11.1f} {s - h:>9.1f} {s / h:>6.2f}")
    h, s = bare
    print(f"{'bash -c true, no server':<28} {h:>9.1f} {s:>11.1f} {s - h:>9.1f} {s / h:>6.2f}")


if __name__ == "__main__":
    main()
