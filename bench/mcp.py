"""An MCP tool call vs a built-in one: the whole turn (demo model, tool call, checkpoint,
commit) through the core `Braid`, a `read` through a stdio MCP server (the test server,
tests/fixtures/mcp_server.py, on the official SDK) next to the built-in `read_file` of the
same file, alternated, median of SAMPLES each; and separately the first MCP call of a session
(the server started for it).

Run: .venv/bin/python bench/mcp.py   (BENCH_SAMPLES: turns per kind, default 30;
BENCH_STARTS: sessions whose first call is timed, default 5)
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This file's own folder first on the path would make `import mcp` find this script, not the
# SDK: the repository's root takes its place.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from server.agent.sandbox import box  # noqa: E402
from server.app.braid import Braid  # noqa: E402
from server.base.settings import Settings  # noqa: E402
from server.features import sessions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "fixtures" / "mcp_server.py"
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "30"))
STARTS = int(os.environ.get("BENCH_STARTS", "5"))
USER = "local"


async def timed_turn(braid: Braid, sid: str, text: str) -> float:
    start = time.perf_counter()
    run = await sessions.run_to_end(braid, USER, sid, text)
    took = time.perf_counter() - start
    tools = [m for m in run["messages"] if m["role"] == "tool"]
    assert run["status"] == "COMPLETED" and tools and not tools[0].get("is_error"), run
    return took


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mcp.json"
        # In the session's sandbox where one can be made (as a user's server runs).
        config.write_text(json.dumps({"mcpServers": {"files": {
            "command": sys.executable, "args": [str(SERVER)],
            "sandbox": box.why_not() is None}}}))
        braid = Braid(Settings(data_dir=Path(tmp) / "data", mcp_file=config,
                               idle_seconds=3600))
        await braid.start()
        try:
            first: list[float] = []
            for _ in range(STARTS):
                sid = (await sessions.create_session(braid, USER))["session_id"]
                (braid.store.path(sid) / "workdir" / "a.txt").write_text("hello\n")
                first.append(await timed_turn(braid, sid, 'call mcp__files__read {"path": '
                                                          '"a.txt"}'))
            builtin: list[float] = []
            mcp: list[float] = []
            for _ in range(SAMPLES):  # alternated, so both see the same machine
                builtin.append(await timed_turn(braid, sid, "read a.txt"))
                mcp.append(await timed_turn(braid, sid, 'call mcp__files__read {"path": '
                                                        '"a.txt"}'))
        finally:
            await braid.stop()
    b, m, f = (statistics.median(x) * 1000 for x in (builtin, mcp, first))
    where = "in the sandbox" if box.why_not() is None else "unsandboxed (no sandbox here)"
    print(f"whole turn, median of {SAMPLES} each (ms); the MCP server {where}")
    print(f"{'built-in read_file':<34}{b:>10.1f}")
    print(f"{'mcp__files__read (stdio)':<34}{m:>10.1f}   x{m / b:.2f}")
    print(f"{'first MCP call (server start)':<34}{f:>10.1f}   x{f / b:.2f}"
          f"   (median of {STARTS} sessions)")


if __name__ == "__main__":
    asyncio.run(main())
