"""kill -9 inside a Resume that goes on at the branch's end (a failed run with a turn after
it, features/timetravel.py `_resume_at_end`): at the model call and at the last commit. The
restart keeps every turn, the later one's file included, on the one branch, the resuming run
committed with its copies of the failed run's messages and the failed run marked as resumed
by it (a second Resume of it refused); the invariants of the crash matrix
hold and the session is usable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Server, free_port, git
from tests.faults.test_crash_matrix import check_repo, crash_at, use_session


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    """(data dir, session id, the failed run, the later run)."""
    root = tmp_path_factory.mktemp("resume") / "template"
    root.mkdir(parents=True)
    srv = Server(data_dir=root / "data", port=free_port()).start()
    try:
        sid = srv.new_session()
        failed = srv.run(sid, "fail boom")
        assert failed["status"] == "ERROR", failed
        later = srv.run(sid, "write later.txt made later")
        return srv.data_dir, sid, failed["run_id"], later["run_id"]
    finally:
        srv.stop()


def records(repo: Path) -> dict[str, dict[str, object]]:
    names = git(repo, "ls-tree", "-r", "--name-only", "main", "runs/").split()
    out = {}
    for name in names:
        record = json.loads(git(repo, "show", f"main:{name}"))
        out[str(record["run_id"])] = record
    return out


@pytest.mark.parametrize("point", ["turn.model", "turn.finish"])
def test_a_resume_at_the_end_killed_keeps_every_turn(template: tuple[Path, str, str, str],
                                                    tmp_path: Path, point: str) -> None:
    source, sid, failed, later = template
    data_dir = tmp_path / "data"
    shutil.copytree(source, data_dir, symlinks=True)
    repo = data_dir / "sessions" / sid
    tip = git(repo, "rev-parse", "main").strip()
    crash_at(data_dir, point, {"action": "continue_run", "run_id": failed,
                               "input": "say recovered"}, sid)
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        check_repo(repo)
        assert git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split() \
            == ["main"]  # no sibling branch
        assert git(repo, "merge-base", "--is-ancestor", tip, "main") == ""
        assert (repo / "workdir" / "later.txt").read_text() == "made later\n"
        runs = records(repo)
        assert runs[failed]["status"] == "ERROR" and runs[later]["status"] == "COMPLETED"
        [resumed] = [r for r in runs.values() if r.get("resumes_run_id") == failed]
        assert resumed["status"] == "INTERRUPTED", resumed
        assert resumed["branch"] == "main"
        # The failed run's Resume is spent in the same commit, and refused again; the
        # resuming run goes on in place.
        assert runs[failed]["resumed_by_run_id"] == resumed["run_id"]
        ws = srv.socket(sid)
        again = ws.call("continue_run", run_id=failed)
        assert again["type"] == "error" and again["error"]["code"] == "already_resumed", again
        assert again["error"]["details"]["resumed_by_run_id"] == resumed["run_id"]
        ws.close()
        check_repo(repo)
        use_session(srv, sid)
        check_repo(repo)
    finally:
        srv.stop()
