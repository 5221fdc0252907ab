"""Where a sandboxed command's time goes (issue 31: ≤ 10 ms added per command): each step of
the shell's way of running `true` (agent/sandbox/start.py), on a sandbox made ahead for its
workdir ("warm") and on one made on the spot ("cold"), next to `bash -c true` on the host and a bare
`bwrap --unshare-all` around `/bin/true`, the samples interleaved. Prints medians and
minimums (ms) and the load average.

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

from server.agent.sandbox import box, egress, start  # noqa: E402
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
    env = box.base_env(egress.proxy_env())
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

            for way in ("warm", "cold"):
                time.sleep(0.02)  # the keeper makes the next warm meanwhile
                proxies: list[egress.Proxy] = []

                def ready(pid: int, proxies: list[egress.Proxy] = proxies,
                          way: str = way) -> None:
                    t1 = time.perf_counter()
                    listener = egress.attach(pid)
                    proxy = egress.Proxy(_allow, ())
                    asyncio.run_coroutine_threadsafe(proxy.serve(listener), loop)
                    proxies.append(proxy)
                    took(f"{way} 1b of which: the egress listener in its netns", t1)

                t0 = t = time.perf_counter()
                if way == "warm":
                    started = start.shell("true", workdir=work, env=env, limits=limits,
                                          ready=ready)
                else:  # what `shell` does when no sandbox waits
                    started = start.Sandbox((), limits, Cgroup.take(limits), command_fd=True)
                    started.build(work, env, ())
                    started.run("true", ready)
                t = took(f"{way} 1 start: bwrap up, bounds and proxy on", t)
                started.proc.wait()
                started.output.read()
                t = took(f"{way} 2 the command runs, bwrap exits", t)
                started.close()
                started.output.close()
                if started.cgroup is not None:
                    started.cgroup.release()
                for proxy in proxies:
                    asyncio.run_coroutine_threadsafe(proxy.close(), loop)
                t = took(f"{way} 3 release the cgroup, stop the proxy", t)
                took(f"{way} = all of it", t0)
            if i == 0:  # a warm-up
                times.clear()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
          "{:.2f} {:.2f} {:.2f} at the end; {} CPUs".format(*os.getloadavg(), os.cpu_count()))
    print(f"{'step':<40} {'median ms':>10} {'min ms':>8}   ({args.samples} samples)")
    for name in sorted(times, key=lambda n: (n[0] in "bh", n)):
        values = times[name]
        print(f"{name:<40} {statistics.median(values):>10.2f} {min(values):>8.2f}")


if __name__ == "__main__":
    main()
