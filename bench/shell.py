"""The shell's sandbox (issue 31): a whole turn running one command, through the socket
(`send_message` in, `run_completed` out) against two real servers side by side, one with
BRAID_SHELL=sandbox and one with BRAID_SHELL=host, the samples interleaved so both see the
same machine. Commands: `true`, `python3 -c pass`, `ls -R` of 1,000 files; and a `say`
turn without the shell as the floor. Prints the medians and what the sandbox adds; then the
same commands run the way the shell runs them (`run_shell`, `run_sandboxed`) without a
server. `--baseline DIR` adds a third server, sandboxed, from another checkout (an older
commit: `git worktree add DIR COMMIT`), interleaved with the two others.

    .venv/bin/python bench/shell.py [--samples 30] [--baseline DIR]
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
    def __init__(self, mode: str, data: Path, root: Path = ROOT) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONMALLOC": "malloc", "BRAID_SERVER_MALLOC": "1",
               "BRAID_TOKEN": TOKEN, "BRAID_MODEL": "demo", "BRAID_SHELL": mode}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--port", str(self.port),
             "--data-dir", str(data)], cwd=root, env=env, stdout=subprocess.DEVNULL,
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


SHELL_COMMANDS = {"true": "true", "python3 -c pass": "/usr/bin/python3 -c pass",
                  "ls -R (1,000 files)": "ls -R tree > /dev/null"}


def bare_ms(samples: int) -> dict[str, tuple[float, float]]:
    """Each command run the way the shell runs it, without a server: `run_shell` (host) and
    `run_sandboxed` (its cgroup, rlimits, seccomp; no network), interleaved: name -> (host,
    sandbox) medians."""
    sys.path.insert(0, str(ROOT))
    from server.agent import shell

    found: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for d in range(10):
            (work / "tree" / f"d{d}").mkdir(parents=True)
            for f in range(100):
                (work / "tree" / f"d{d}" / f"f{f}").write_text(f"{f}\n")
        for name, command in SHELL_COMMANDS.items():
            host: list[float] = []
            boxed: list[float] = []
            for _ in range(samples + 1):  # the first of each: a warm-up
                t0 = time.perf_counter()
                shell.run_shell(command, cwd=work, timeout=60)
                host.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                out, failed = shell.run_sandboxed(command, workdir=work,
                                                  plan=shell.Sandboxing())
                boxed.append((time.perf_counter() - t0) * 1000)
                if failed or not out.startswith("exit code: 0"):
                    raise RuntimeError(f"the sandboxed command failed: {out}")
            found[name] = (statistics.median(host[1:]), statistics.median(boxed[1:]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--baseline", type=Path, help="another checkout, run sandboxed too")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        servers = {"sandbox": Served("sandbox", Path(tmp) / "sandbox"),
                   "host": Served("host", Path(tmp) / "host")}
        if args.baseline is not None:
            servers["baseline"] = Served("sandbox", Path(tmp) / "baseline",
                                         args.baseline.resolve())
        try:
            results: dict[str, dict[str, list[float]]] = {}
            for name, text in COMMANDS.items():
                for served in servers.values():  # warm up
                    served.turn_ms(text)
                times: dict[str, list[float]] = {mode: [] for mode in servers}
                for _ in range(args.samples):
                    for mode, served in servers.items():
                        times[mode].append(served.turn_ms(text))
                results[name] = times
        finally:
            for served in servers.values():
                served.close()
    bare = bare_ms(args.samples)
    base = "  baseline ms" if args.baseline is not None else ""
    print(f"load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at the end "
          "{:.2f} {:.2f} {:.2f}; {} CPUs".format(*os.getloadavg(), os.cpu_count()))
    print(f"{'turn':<28} {'host ms':>9} {'sandbox ms':>11} {'added ms':>9} {'ratio':>6}{base}"
          f"   (median of {args.samples}, interleaved; whole turn through the socket)")
    for name, times in results.items():
        h, s = statistics.median(times["host"]), statistics.median(times["sandbox"])
        extra = f" {statistics.median(times['baseline']):>12.1f}" if "baseline" in times else ""
        print(f"{name:<28} {h:>9.1f} {s:>11.1f} {s - h:>9.1f} {s / h:>6.2f}{extra}")
    print(f"{'command, no server':<28} {'host ms':>9} {'sandbox ms':>11} {'added ms':>9} "
          f"{'ratio':>6}   (run_shell vs run_sandboxed)")
    for name, (h, s) in bare.items():
        print(f"{name:<28} {h:>9.1f} {s:>11.1f} {s - h:>9.1f} {s / h:>6.2f}")


if __name__ == "__main__":
    main()
