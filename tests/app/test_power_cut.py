"""Start-up after a power cut (app/power_cut.py): what an older Braid or a lying disk could
leave — a branch at a commit whose object is gone, a torn index file — is rolled back to the
last whole state before anything is served; the run it loses is INTERRUPTED, in git and in
the index alike. A clean stop leaves nothing to check."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, git


def loose_path(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


@pytest.mark.slow
def test_a_branch_at_a_missing_commit_goes_back_to_the_last_whole_one(
        server_factory: Any) -> None:
    srv: Server = server_factory()
    sid = srv.new_session()
    first = srv.run(sid, "write a.txt one")["run_id"]
    second = srv.run(sid, "write b.txt two\nbatch\nwrite c.txt three")["run_id"]
    repo = srv.session_path(sid)
    tip = git(repo, "rev-parse", "main").strip()
    before = git(repo, "rev-parse", "main~1").strip()  # the turn's tool batch, RUNNING
    srv.stop(signal.SIGKILL)  # no clean stop: its marker stays
    assert list((srv.data_dir / ".running").iterdir())
    # What a cut could leave with objects written but never synced: the tip's object gone,
    # the index file torn.
    loose_path(repo, tip).unlink()
    (repo / ".git" / "index").write_bytes(b"DIRC\0\0\0\2torn")

    again: Server = server_factory(data_dir=srv.data_dir)
    status, info = again.api("GET", f"/api/sessions/{sid}")
    assert status == 200, info
    # Back to the last whole commit, then the run it left RUNNING committed INTERRUPTED.
    assert git(repo, "rev-parse", "main~1").strip() == before
    assert_fsck(repo)
    runs = {r["run_id"]: r["status"] for r in info["runs"]}
    assert runs == {first: "COMPLETED", second: "INTERRUPTED"}, runs
    record = json.loads(git(repo, "show", f"main:{_run_rel(repo, second)}"))
    assert record["status"] == "INTERRUPTED"
    assert git(repo, "status", "--porcelain") == ""
    # The session goes on.
    assert again.run(sid, "write d.txt four")["status"] == "COMPLETED"
    assert_fsck(repo)


def _run_rel(repo: Path, run_id: str) -> str:
    names = git(repo, "ls-tree", "-r", "--name-only", "main", "runs/").split()
    return next(n for n in names if n.endswith(f"/{run_id}.json") or n == f"runs/{run_id}.json")


def test_a_clean_stop_leaves_no_marker(server_factory: Any) -> None:
    srv: Server = server_factory()
    srv.new_session()
    assert len(list((srv.data_dir / ".running").iterdir())) == 1
    srv.stop()
    assert not list((srv.data_dir / ".running").iterdir())


@pytest.mark.slow
def test_reflogs_a_cut_left_naming_what_it_took_are_made_whole(server_factory: Any) -> None:
    """Reflogs are not synced: a cut can bring back the log of a branch whose removal was
    synced (its commits gone), or keep a line naming a commit whose tree the cut took. `git
    fsck` reads every log: start-up removes the one and prunes the other (power-cut team
    test, 2026-12-07: "invalid reflog entry", "broken link from commit to tree")."""
    srv: Server = server_factory()
    sid = srv.new_session()
    srv.run(sid, "write a.txt one")
    repo = srv.session_path(sid)
    tip = git(repo, "rev-parse", "main").strip()
    srv.stop(signal.SIGKILL)
    gone = "1" * 40
    (repo / ".git" / "logs" / "refs" / "heads" / "sub_gone").write_text(
        f"{'0' * 40} {gone} A <a@b> 1 +0000\tbranch: Created from {gone}\n")
    treeless = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--literally",
         "--stdin"], input=f"tree {'2' * 40}\nparent {tip}\nauthor A <a@b> 1 +0000\n"
                           "committer A <a@b> 1 +0000\n\nlost\n",
        capture_output=True, text=True, check=True).stdout.strip()
    with (repo / ".git" / "logs" / "refs" / "heads" / "main").open("a") as f:
        f.write(f"{tip} {treeless} A <a@b> 1 +0000\tcommit: lost\n")
    assert subprocess.run(["git", "-C", str(repo), "fsck", "--strict"],
                          capture_output=True).returncode != 0

    again: Server = server_factory(data_dir=srv.data_dir)
    status, _ = again.api("GET", f"/api/sessions/{sid}")
    assert status == 200
    assert_fsck(repo)
    assert not (repo / ".git" / "logs" / "refs" / "heads" / "sub_gone").exists()
    assert git(repo, "rev-parse", "main").strip() == tip
    kept = git(repo, "reflog", "show", "--format=%H", "main").split()
    assert tip in kept and treeless not in kept


def test_a_session_whose_only_newer_names_are_its_refs_is_looked_at(tmp_path: Path) -> None:
    """The refs are synced; the index and the logs are not, so a cut can take their times
    back: a session is still looked at when only a ref (or its folder) is newer."""
    import os
    import time

    from server.app.power_cut import written_since

    repo = tmp_path / "s"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    git_dir = repo / ".git"
    old = time.time() - 3600
    for top, dirs, names in os.walk(git_dir):
        for name in (*dirs, *names):
            os.utime(Path(top) / name, (old, old))
    since = time.time() - 60
    assert not written_since(git_dir, since)
    ref = git_dir / "refs" / "heads" / "main"
    os.utime(ref)  # what the cut kept: the ref, synced; the logs and index went back
    assert written_since(git_dir, since)
    os.utime(ref, (old, old))
    os.utime(git_dir / "refs" / "heads")  # a new branch's name, its folder synced
    assert written_since(git_dir, since)
