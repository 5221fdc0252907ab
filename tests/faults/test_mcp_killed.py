"""kill -9 of Braid while a session's stdio MCP server runs: no server process is left after
the restart (DESIGN §4 "MCP tools"; launch.py: the parent-death signal, the owner tag swept
at start)."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_kill_9_of_braid_leaves_no_mcp_server_after_the_restart(
        server_factory: Any, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {
        "command": sys.executable, "args": [str(SERVER)], "sandbox": False}}}))
    srv = server_factory(BRAID_MCP=str(config))
    sid = srv.new_session()
    run = srv.run(sid, "call mcp__files__whoami {}")
    [result] = [m for m in run["messages"] if m["role"] == "tool"]
    found = re.search(r"pid (\d+)", result["content"])
    assert found, result
    pid = int(found.group(1))
    assert alive(pid)
    srv.stop(signal.SIGKILL)
    srv.start()  # the same data dir
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    # The session works on: the next call starts a server again.
    again = srv.run(sid, "call mcp__files__whoami {}")
    assert not [m for m in again["messages"] if m["role"] == "tool"][0].get("is_error")
