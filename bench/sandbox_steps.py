"""Where a sandboxed command's time goes (issue 31: ≤ 10 ms added per command): each step of
the shell's way of starting `bash -c true` (agent/sandbox/start.py) timed on its own, next
to `bash -c true` on the host and a bare `bwrap --unshare-all` around `/bin/true`, the
samples interleaved. Prints medians and minimums (ms) and the load average.

    .venv/bin/python bench/sandbox_steps.py [--samples 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.agent.sandbox import box, egress, start, syscalls  # noqa: E402
from server.agent.sandbox.limits import Cgroup, Limits  # noqa: E402


async def _allow(host: str, port: int) -> str | None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    times: dict[str, list[float]] = {}

    def took(name: str, t0: float) -> float:
        now = time.perf_counter()
        times.setdefault(name, []).append((now - t0) * 1000)
        return now

    load = os.getloadavg()
    limits = Limits()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i in range(args.samples + 1):
            t = time.perf_counter()
            subprocess.run(["/bin/bash", "-c", "true"], cwd=work, check=True)
            took("host: bash -c true", t)
            t = time.perf_counter()
            subprocess.run([str(box.bwrap()), "--unshare-all", "--ro-bind", "/", "/",
                            "/bin/true"], check=True, env={})
            took("bare bwrap --unshare-all true", t)

            t0 = t = time.perf_counter()
            group = Cgroup.take(limits, "bench")
            t = took("1 take a cgroup (made ahead)", t)
            env = box.base_env(egress.proxy_env())
            argv = [*box.bwrap_argv(work, env, (), limits), "--json-status-fd", "STATUS",
                    "--block-fd", "BLOCK"]
            syscalls.program()
            t = took("2 argv and seccomp program", t)
            proxies: list[egress.Proxy] = []

            def ready(pid: int, proxies: list[egress.Proxy] = proxies) -> None:
                t1 = time.perf_counter()
                listener = egress.attach(pid)
                proxy = egress.Proxy(_allow, ())
                asyncio.run_coroutine_threadsafe(proxy.serve(listener), loop)
                proxies.append(proxy)
                took("3b of which: the egress listener in its netns", t1)

            started = start.start(["/bin/bash", "-c", "true"], workdir=work, env=env,
                                  limits=limits, cgroup=group, ready=ready)
            t = took("3 start: bwrap up, bounds and proxy on", t)
            started.proc.wait()
            t = took("4 the command runs, bwrap exits", t)
            started.close()
            if group is not None:
                group.release()
            for proxy in proxies:
                asyncio.run_coroutine_threadsafe(proxy.close(), loop)
            t = took("5 release the cgroup, stop the proxy", t)
            took("= all of it", t0)
            del argv
            if i == 0:  # a warm-up
                times.clear()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
          "{:.2f} {:.2f} {:.2f} at the end; {} CPUs".format(*os.getloadavg(), os.cpu_count()))
    print(f"{'step':<40} {'median ms':>10} {'min ms':>8}   ({args.samples} samples)")
    for name in sorted(times, key=lambda n: (n[0] not in "=12345", n)):
        values = times[name]
        print(f"{name:<40} {statistics.median(values):>10.2f} {min(values):>8.2f}")


if __name__ == "__main__":
    main()
