"""kill -9 of the server during a sandboxed command (DESIGN §4 "The shell": nothing it
starts outlives it): the command's processes die with the server (bwrap --die-with-parent:
its PID 1 gets SIGKILL, the kernel ends the rest of its PID namespace), the restart removes
what is left of its cgroup, and the run is INTERRUPTED as before."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from conftest import Server, free_port, git
from server.agent.sandbox import limits


def sleeping(seconds: str) -> list[int]:
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if path.read_bytes() == f"sleep\0{seconds}\0".encode():
                if path.with_name("stat").read_text().rpartition(")")[2].split()[0] != "Z":
                    found.append(int(path.parent.name))
        except OSError:
            continue
    return found


def cgroups_of(pid: int) -> list[Path]:
    return [p for c in limits.CONTROLLERS for p in Path("/sys/fs/cgroup").glob(
        f"{c}/**/{limits.PREFIX}{pid}-*")]


def test_kill_9_during_a_command_leaves_nothing_after_the_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data_dir=data, port=free_port(), env={"BRAID_SHELL": "sandbox"}).start()
    try:
        sid = srv.new_session()
        ws = srv.socket(sid)
        reply = ws.call("send_message", text="shell setsid sleep 4741 & nohup sleep 4742 & "
                        "echo started > started.txt; sleep 4743\nsay done")
        run_id = reply["data"]["run_id"]
        deadline = time.monotonic() + 60
        while not (sleeping("4741") and sleeping("4742") and sleeping("4743")):
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        assert srv.proc is not None
        dead_pid = srv.proc.pid
        srv.stop(signal.SIGKILL)
        assert srv.proc.returncode == -signal.SIGKILL
    finally:
        srv.stop()
    while sleeping("4741") or sleeping("4742") or sleeping("4743"):
        assert time.monotonic() < deadline + 30, "a process outlived the server"
        time.sleep(0.05)

    again = Server(data_dir=data, port=free_port(), env={"BRAID_SHELL": "sandbox"}).start()
    try:
        status, info = again.api("GET", f"/api/sessions/{sid}")
        assert status == 200
        assert {r["run_id"]: r["status"] for r in info["runs"]}[run_id] == "INTERRUPTED"
        if limits.why_not() is None:  # the dead server's cgroups are gone with it
            assert cgroups_of(dead_pid) == []
        path = again.session_path(sid)
        assert git(path, "status", "--porcelain") == ""
        assert not sleeping("4741") and not sleeping("4742") and not sleeping("4743")
    finally:
        again.stop()
