"""The shell on a team server (two `braid serve` processes on one data dir and PostgreSQL,
two users): each user's commands run in the sandbox of their own session, so neither user's
agent reaches the other's files, whichever process drives the turn."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from conftest import ROOT


def tool_text(run: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in run["messages"] if m["role"] == "tool")


def test_neither_users_agent_reaches_the_others_files(team_pair: Any) -> None:
    a, b = team_pair
    env = {**os.environ, "BRAID_DATABASE_URL": a.env["BRAID_DATABASE_URL"]}
    out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", "bob",
                          "--data-dir", str(a.data_dir)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    bob = out.stdout.strip().splitlines()[-1]
    mine = a.new_session()
    run = a.run(mine, "shell echo alice-secret > secret.txt\nsay ok")
    assert run["status"] == "COMPLETED", run
    secret = a.session_path(mine) / "workdir" / "secret.txt"
    assert secret.read_text() == "alice-secret\n"
    status, his = b.api("POST", "/api/sessions", {}, token=bob)
    assert status == 201
    sessions = a.data_dir / "sessions"
    status, run = b.api("POST", f"/api/sessions/{his['session_id']}/runs",
                        {"input": f"shell cat {secret}; ls {sessions}; "
                                  f"cat {sessions}/*/workdir/secret.txt\nsay ok"}, token=bob)
    assert status == 200 and run["status"] == "COMPLETED", run
    text = tool_text(run)
    assert "alice-secret\n" not in text.replace(str(secret), "") and f"\n{mine}\n" not in text
    # And the other way round, on the other process.
    status, run = b.api("POST", f"/api/sessions/{his['session_id']}/runs",
                        {"input": "shell echo bob-secret > mine.txt\nsay ok"}, token=bob)
    assert status == 200
    theirs = a.session_path(his["session_id"]) / "workdir" / "mine.txt"
    run = a.run(mine, f"shell cat {theirs}\nsay ok")
    assert "bob-secret\n" not in tool_text(run).replace(str(theirs), "")
