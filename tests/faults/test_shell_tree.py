"""Shell commands are killed with all their descendants (D16): a child that escaped the
process group with `setsid` dies with the command, on timeout and at its normal end, and
the command runs under resource limits."""

from __future__ import annotations

import time
from pathlib import Path

from server.agent.shell import run_shell

ESCAPE = "setsid sh -c 'echo $$ > {name}; exec sleep 300' > /dev/null 2>&1 &"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie waits for init to reap it: it is dead


def pid_in(path: Path) -> int:
    deadline = time.monotonic() + 5
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, "the escaped child never started"
        time.sleep(0.05)
    return int(path.read_text())


def test_a_setsid_child_dies_when_the_command_ends(tmp_path: Path) -> None:
    text, failed = run_shell(ESCAPE.format(name="pid") + " sleep 0.3; echo done",
                             cwd=tmp_path, timeout=10)
    assert not failed and "done" in text
    pid = pid_in(tmp_path / "pid")
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_a_setsid_child_dies_on_timeout(tmp_path: Path) -> None:
    text, failed = run_shell(ESCAPE.format(name="pid") + " sleep 100", cwd=tmp_path,
                             timeout=1)
    assert failed and "timed out" in text
    pid = pid_in(tmp_path / "pid")
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_commands_run_under_resource_limits(tmp_path: Path) -> None:
    text, failed = run_shell("ulimit -t; ulimit -c", cwd=tmp_path, timeout=5)
    assert not failed
    cpu, core = text.split("\n")[1:3]
    assert cpu == "6" and core == "0"
