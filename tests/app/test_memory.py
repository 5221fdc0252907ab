"""The serving process's allocator, and what it gives back when quiet (memory.py, issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

# Run as `python -c CHECK a 'b c'`: re-executed once, then it says what it runs with. Python's
# own allocator is the one whose statistics name a "Small block threshold".
CHECK = """
import json, os, subprocess, sys
from server.app.memory import use_system_allocator
use_system_allocator()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('PYTHONMALLOC'))"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "child": child,
                  "env": os.environ.get("PYTHONMALLOC")}), flush=True)
sys._debugmallocstats()
"""


def run_check(**env: str) -> tuple[dict[str, Any], str, int]:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    proc = subprocess.Popen([sys.executable, "-c", CHECK, "a", "b c"], cwd=ROOT,
                            env={**base, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out), err, proc.pid


def test_the_server_re_executes_itself_on_the_system_allocator() -> None:
    found, stats, pid = run_check()
    assert "Small block threshold" not in stats  # glibc's malloc, not pymalloc
    assert found["pid"] == pid  # the same process (a kill -9 of its pid still kills it)
    assert found["argv"] == ["a", "b c"]  # its arguments as they were
    # Neither the process's environment nor its children's keep the setting: a command
    # the shell tool runs gets the user's own allocator.
    assert found["env"] is None and found["child"] == "None"


def test_a_users_own_allocator_setting_is_kept() -> None:
    found, stats, pid = run_check(PYTHONMALLOC="pymalloc")
    assert "Small block threshold" in stats
    assert found["pid"] == pid
    assert found["env"] == "pymalloc" and found["child"] == "pymalloc"


@pytest.mark.slow
def test_the_served_process_runs_on_malloc_and_its_commands_do_not(server_factory: Any) -> None:
    server = server_factory(BRAID_SHELL="on")
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"PYTHONMALLOC=malloc" in environ
    sid = server.new_session()
    done = server.run(sid, 'shell echo "allocator=${PYTHONMALLOC:-default}" > env.txt')
    assert done["status"] == "COMPLETED", done
    env_txt = server.session_path(sid) / "workdir" / "env.txt"
    assert env_txt.read_text() == "allocator=default\n"


def test_with_no_interpreter_to_run_again_it_serves_on_this_one() -> None:
    script = ("import sys\nfrom server.app.memory import use_system_allocator\n"
              "sys.executable = '/nonexistent/python'\nuse_system_allocator()\n"
              "print('serving', flush=True)\nsys._debugmallocstats()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "serving\n", out.stderr
    assert "Small block threshold" in out.stderr  # still Python's own allocator
