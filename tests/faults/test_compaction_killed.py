"""kill -9 inside a compaction (DESIGN §4 "Compaction"), a turn's and one on demand, at each
of its points: the summary asked of the model, before and after its one commit. After the
restart the branch is as before or holds the whole compaction (its message and record in one
commit), the turn it came before is recovered, and the session goes on. A summary call that
fails leaves the turn to the old cut (oldest left out with a note), never a failed run."""

from __future__ import annotations

import json
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, free_port, git
from tests.faults.test_crash_matrix import check_repo

FILLER = "lorem ipsum dolor sit amet " * 12
SMALL = {"BRAID_CONTEXT_TOKENS": "2600"}
POINTS = ("compaction.model", "compaction.before_commit", "compaction.after_commit")


@dataclass
class Template:
    data_dir: Path
    sid: str


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A session whose next turn no longer fits even masked (made with compaction off)."""
    data_dir = tmp_path_factory.mktemp("compaction") / "data"
    srv = Server(data_dir=data_dir, port=free_port(),
                 env={**SMALL, "BRAID_COMPACTION": "off"}).start()
    try:
        sid = srv.new_session()
        for i in range(16):
            assert srv.run(sid, f"say m{i}\n{FILLER}")["status"] == "COMPLETED"
        ended = srv.run(sid, "say last")
        assert ended["context"]["omitted_messages"] > 0, ended["context"]
    finally:
        srv.stop()
    return Template(data_dir, sid)


def compaction_records(repo: Path) -> list[dict[str, Any]]:
    names = git(repo, "ls-tree", "-r", "--name-only", "main", "runs/").split()
    found = [json.loads(git(repo, "show", f"main:{n}")) for n in names]
    return [r for r in found if r.get("kind") == "compaction"]


def kinds_since(repo: Path, tip: str) -> list[str]:
    out = git(repo, "log", "--format=%(trailers:key=Braid-Kind,valueonly)", f"{tip}..main")
    return [k for k in out.split() if k]


def killed_at(data_dir: Path, sid: str, point: str, action: dict[str, Any]) -> None:
    srv = Server(data_dir=data_dir, port=free_port(), env={**SMALL, "BRAID_CRASH_AT": point})
    srv.start()
    ws = srv.socket(sid)
    ws.send(action["action"], **{k: v for k, v in action.items() if k != "action"})
    try:
        while True:
            ws.next(timeout=30)
    except Exception:  # noqa: BLE001 - the socket dies with the server
        pass
    assert srv.proc is not None
    assert srv.proc.wait(timeout=30) == -signal.SIGKILL, f"{point} was never reached"


CASES = [(how, point) for how in ("turn", "compact") for point in POINTS]


@pytest.mark.parametrize(("how", "point"), CASES, ids=[f"{h}@{p}" for h, p in CASES])
def test_killed_and_restarted(template: Template, tmp_path: Path, how: str, point: str) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template.data_dir, data_dir, symlinks=True)
    repo = data_dir / "sessions" / template.sid
    tip = git(repo, "rev-parse", "main").strip()
    history = git(repo, "ls-tree", "-r", "--name-only", "main", "history/").split()
    action = {"action": "send_message", "text": "recall"} if how == "turn" \
        else {"action": "compact"}
    killed_at(data_dir, template.sid, point, action)
    srv = Server(data_dir=data_dir, port=free_port(), env=SMALL).start()
    try:
        check_repo(repo)
        assert git(repo, "merge-base", "--is-ancestor", tip, "main") == ""
        made = compaction_records(repo)
        done = point == "compaction.after_commit"
        # As before, or with the whole compaction: its message and record in one commit.
        assert len(made) == (1 if done else 0), made
        after = git(repo, "ls-tree", "-r", "--name-only", "main", "history/").split()
        assert set(history) <= set(after)
        summaries = [n for n in after if n not in history and "-system-" in n]
        assert len(summaries) == (1 if done else 0)
        expected = ["compaction"] if done else []
        if how == "turn":  # the killed turn, recovered INTERRUPTED after it
            expected = ["turn", *expected]
        assert [k for k in kinds_since(repo, tip) if k != "user-edit"] == expected
        if done:
            assert made[0]["summary"].startswith("summary: say m0 | say m1")
        # The session goes on: a new turn is sent the summary (made now, if it was not).
        run = srv.run(template.sid, "notes")
        assert run["status"] == "COMPLETED", run
        assert "Summary of the earlier conversation: summary: say m0" in run["messages"][-1][
            "content"]
        check_repo(repo)
    finally:
        srv.stop()


def test_a_failed_summary_leaves_the_old_cut(template: Template, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template.data_dir, data_dir, symlinks=True)
    repo = data_dir / "sessions" / template.sid
    srv = Server(data_dir=data_dir, port=free_port(),
                 env={**SMALL, "BRAID_CRASH_AT": "compaction.model",
                      "BRAID_CRASH_MODE": "raise"}).start()
    try:
        run = srv.run(template.sid, "notes")
        assert run["status"] == "COMPLETED", run
        assert "could not be summarized" in run["warning"]
        assert run["context"]["omitted_messages"] > 0
        assert run["messages"][-1]["content"].startswith("Context budget: the ")
        assert compaction_records(repo) == []
        check_repo(repo)
    finally:
        srv.stop()
