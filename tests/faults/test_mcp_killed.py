"""kill -9 of Braid while a session's stdio MCP server runs: no server process is left after
the restart (DESIGN §4 "MCP tools"; launch.py: the parent-death signal, bubblewrap's
--die-with-parent in the sandbox, the owner tag swept at start)."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from server.agent.mcp_servers.launch import OWNER

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"


def host_pids(session_id: str) -> set[int]:
    """The session's MCP server processes, found by their owner tag."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if any(item.startswith(f"{OWNER}=".encode()) and item.endswith(f":{session_id}".encode())
               for item in environ.split(b"\0")):
            found.add(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.parametrize("sandbox", [True, False])
def test_kill_9_of_braid_leaves_no_mcp_server_after_the_restart(
        server_factory: Any, tmp_path: Path, sandbox: bool) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {
        "command": sys.executable, "args": [str(SERVER)], "sandbox": sandbox}}}))
    srv = server_factory(BRAID_MCP=str(config))
    sid = srv.new_session()
    run = srv.run(sid, "call mcp__files__whoami {}")
    [result] = [m for m in run["messages"] if m["role"] == "tool"]
    assert not result.get("is_error"), result
    pids = host_pids(sid)
    assert pids and all(map(alive, pids))
    srv.stop(signal.SIGKILL)
    srv.start()  # the same data dir
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(alive, pids))
    # The session works on: the next call starts a server again.
    again = srv.run(sid, "call mcp__files__whoami {}")
    assert not [m for m in again["messages"] if m["role"] == "tool"][0].get("is_error")
