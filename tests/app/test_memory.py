"""The serving process's allocator, and what it gives back when quiet (memory.py, issue 11).

The allocator is a deployment setting (scripts/run, docs/deployment.md "Memory"): the server
keeps it to itself, and a user's own setting reaches the commands the agent runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from server.app.memory import SERVER_ENV

# Run as `python -c CHECK`: says what it runs with after the server's start-up step. Python's
# own allocator is the one whose statistics name a "Small block threshold".
CHECK = """
import json, os, subprocess, sys
from server.app.memory import keep_allocator_to_self
keep_allocator_to_self()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('PYTHONMALLOC'))"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({"child": child, "env": os.environ.get("PYTHONMALLOC")}), flush=True)
sys._debugmallocstats()
"""


def run_check(**env: str) -> tuple[dict[str, Any], str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", *SERVER_ENV)}
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env={**base, **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_scripts_run_starts_the_server_on_the_system_allocator() -> None:
    exported = re.search(r"^export (.+)$", (ROOT / "scripts" / "run").read_text(), re.M)
    assert exported, "scripts/run sets no allocator"
    assert dict(pair.split("=", 1) for pair in exported.group(1).split()) == SERVER_ENV


def test_the_servers_allocator_stays_with_the_server() -> None:
    found, stats = run_check(**SERVER_ENV)
    assert "Small block threshold" not in stats  # glibc's malloc, not pymalloc
    # Neither the process's environment nor its children's keep the setting: a command
    # the shell tool runs gets the user's own allocator.
    assert found["env"] is None and found["child"] == "None"


def test_a_users_own_allocator_setting_is_kept() -> None:
    found, stats = run_check(PYTHONMALLOC="pymalloc")
    assert "Small block threshold" in stats
    assert found["env"] == "pymalloc" and found["child"] == "pymalloc"


def test_without_the_setting_the_server_runs_on_pythons_own() -> None:
    found, stats = run_check()
    assert "Small block threshold" in stats  # no process replaces itself any more
    assert found["env"] is None and found["child"] == "None"


@pytest.mark.slow
def test_the_served_process_runs_on_malloc_and_its_commands_do_not(server_factory: Any) -> None:
    server = server_factory(BRAID_SHELL="on")  # started with SERVER_ENV, as scripts/run does
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"PYTHONMALLOC=malloc" in environ  # what it started with: the interpreter's choice
    sid = server.new_session()
    done = server.run(sid, 'shell echo "allocator=${PYTHONMALLOC:-default}" > env.txt')
    assert done["status"] == "COMPLETED", done
    env_txt = server.session_path(sid) / "workdir" / "env.txt"
    assert env_txt.read_text() == "allocator=default\n"
