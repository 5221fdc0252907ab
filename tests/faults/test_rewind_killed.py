"""kill -9 inside a per-file revert, its redo and a files-only rewind (DESIGN §4 "Atomic
operations"), at each point their commits pass: after the files, before and after the commit.
The restart finishes the operation or rolls it back; the invariants of the crash matrix hold
(`git fsck`, `git status` clean, nothing announced lost, the session usable)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, free_port, git
from tests.faults.test_crash_matrix import (
    Template,
    build_template,
    check_repo,
    crash_at,
    use_session,
)


def kinds_since(repo: Path, tip: str) -> list[str]:
    out = git(repo, "log", "--format=%(trailers:key=Braid-Kind,valueonly)", f"{tip}..main")
    return [k for k in out.split() if k]


def reverted_files(repo: Path, run_id: str) -> list[str]:
    names = git(repo, "ls-tree", "-r", "--name-only", "main", "runs/").split()
    name = next(n for n in names if n.endswith(f"{run_id}.json"))
    record = json.loads(git(repo, "show", f"main:{name}"))
    return list(record.get("reverted_files") or [])


def check_per_file(t: Template, repo: Path, tip: str) -> str:
    """Revert a.txt of t1 only: done (a.txt gone, sub/b.txt kept, the record says so) or not
    at all."""
    done = kinds_since(repo, tip) == ["revert"]
    assert (repo / "workdir/sub/b.txt").exists()
    assert (repo / "workdir/a.txt").exists() == (not done)
    assert reverted_files(repo, t.t1) == (["a.txt"] if done else [])
    if not done:
        assert git(repo, "rev-parse", "main").strip() == tip
    return "done" if done else "undone"


def check_rewind(t: Template, repo: Path, tip: str) -> str:
    done = kinds_since(repo, tip) == ["revert"]
    assert (repo / "workdir/a.txt").exists() == (not done)
    assert (repo / "workdir/c.txt").exists() == (not done)
    if not done:
        assert git(repo, "rev-parse", "main").strip() == tip
    return "done" if done else "undone"


Frame = Callable[[Template], dict[str, Any]]
CASES: list[tuple[str, str, Frame, Callable[[Template, Path, str], str]]] = [
    (name, point, frame, check)
    for name, frame, check in [
        ("per-file revert", lambda t: {"action": "revert_turn", "turn_id": t.t1,
                                       "paths": ["a.txt"]}, check_per_file),
        ("rewind", lambda t: {"action": "rewind_files", "run_id": t.t1, "message_index": 0},
         check_rewind),
    ]
    for point in (("rewind.after_files" if name == "rewind" else "revert.after_files"),
                  "revert.before_commit", "revert.after_commit")
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return build_template(tmp_path_factory.mktemp("rewind") / "template")


@pytest.mark.parametrize(("name", "point", "frame", "check"), CASES,
                         ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_killed_and_restarted(template: Template, tmp_path: Path, name: str, point: str,
                              frame: Frame, check: Callable[[Template, Path, str], str]) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template.data_dir, data_dir, symlinks=True)
    repo = data_dir / "sessions" / template.sid
    before = git(repo, "for-each-ref", "--format=%(objectname)").split()
    tip = git(repo, "rev-parse", "main").strip()
    announced = crash_at(data_dir, point, frame(template), template.sid)
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        reachable = set(git(repo, "rev-list", "--all").split())
        assert not [c for c in before + announced if c not in reachable]
        check_repo(repo)
        outcome = check(template, repo, tip)
        # The commit announced is the one kept (after_commit), never one rolled back.
        assert outcome == "done" if point.endswith("after_commit") else True
        if name == "per-file revert" and outcome == "done":
            # Its redo, per file, works after the restart.
            ws = srv.socket(template.sid)
            reply = ws.call("unrevert_turn", turn_id=template.t1, paths=["a.txt"])
            ws.close()
            assert reply["type"] == "result", reply
            assert (repo / "workdir/a.txt").exists()
        use_session(srv, template.sid)
        check_repo(repo)
    finally:
        srv.stop()
