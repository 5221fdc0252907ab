"""No write of any operation leaves workdir/ (D3): for merge, checkout, revert, fork and
recovery, a folder of the workdir is swapped for a symlink to a folder outside the session,
then the operation runs; the outside folder must be untouched, whatever the operation answers
(it may refuse with `conflict`, or replace the symlink by a real folder)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, git, new_session, run_turn
from server.base.errors import BraidError
from server.features import fork, merge, revert, sessions, subagents, timetravel
from server.git.workdir import guarded
from server.store import journal


def outside_dir(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "a.txt").write_text("outside\n")
    return out


def swap_for_link(path: Path, outside: Path) -> None:
    sub = path / "workdir" / "sub"
    for child in sub.iterdir() if sub.is_dir() else ():
        child.unlink()
    if sub.is_dir():
        sub.rmdir()
    os.symlink(outside, sub)


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["a.txt"]
    assert (outside / "a.txt").read_text() == "outside\n"


async def attempt(coro: Any) -> str:
    try:
        await coro
    except BraidError as e:
        return e.code
    return "ok"


async def test_merge_never_writes_through_a_symlinked_folder(braid: Any, tmp_path: Path
                                                             ) -> None:
    sid, path = await new_session(braid)
    t0 = await run_turn(braid, sid, "write sub/a.txt inside")
    sub = await subagents.spawn_sub_agent(braid, "local", sid, t0["run_id"],
                                          "write sub/a.txt evil\nwrite sub/new.txt evil")
    outside = outside_dir(tmp_path)
    swap_for_link(path, outside)
    for strategy in ("fail", "theirs"):
        code = await attempt(merge.merge_branches(braid, "local", sid, [sub["branch"]],
                                                  "merge", strategy))
        assert code in ("ok", "conflict"), code
        untouched(outside)
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_checkout_never_writes_through_a_symlinked_folder(braid: Any, tmp_path: Path
                                                                ) -> None:
    sid, path = await new_session(braid)
    t0 = await run_turn(braid, sid, "write x.txt one")
    fork_run = await timetravel.continue_run_to_end(braid, "local", sid, t0["run_id"],
                                                    input="write sub/a.txt evil", fork=True)
    branch = f"run/{fork_run['run_id']}"
    await sessions.checkout(braid, "local", sid, "main")
    outside = outside_dir(tmp_path)
    swap_for_link(path, outside)
    code = await attempt(sessions.checkout(braid, "local", sid, branch))
    assert code in ("ok", "conflict")
    untouched(outside)
    code = await attempt(sessions.checkout(braid, "local", sid, "main"))
    untouched(outside)
    assert git(path, "status", "--porcelain") == ""


async def test_revert_never_writes_through_a_symlinked_folder(braid: Any, tmp_path: Path
                                                              ) -> None:
    sid, path = await new_session(braid)
    t0 = await run_turn(braid, sid, "write sub/a.txt inside")
    outside = outside_dir(tmp_path)
    swap_for_link(path, outside)
    for call in (revert.revert_turn, revert.unrevert_turn):
        code = await attempt(call(braid, "local", sid, t0["run_id"], True))
        assert code in ("ok", "conflict"), code
        untouched(outside)


async def test_fork_checks_out_a_committed_symlink_as_a_link(braid: Any, tmp_path: Path
                                                             ) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write sub/a.txt inside")
    outside = outside_dir(tmp_path)
    swap_for_link(path, outside)
    forked = await fork.fork_session(braid, "local", sid)
    copy = braid.store.path(forked["session_id"])
    assert (copy / "workdir/sub").is_symlink()
    untouched(outside)
    assert git(copy, "status", "--porcelain") == ""


async def test_recovery_never_writes_through_a_symlinked_folder(make_braid: Any,
                                                                tmp_path: Path) -> None:
    data = tmp_path / "data"
    braid = await make_braid(data)
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write sub/a.txt inside")
    await braid.stop()
    # A revert killed after its intent: rolling back rewrites workdir/sub/a.txt from HEAD,
    # but the folder is a symlink to outside by now.
    head = git(path, "rev-parse", "HEAD").strip()
    record = {"op": "revert", "kind": "revert", "branch": "main", "head": head,
              "paths": ["workdir/sub/a.txt", "workdir/sub/b.txt"]}
    (path / ".git" / journal.INTENT).write_text(json.dumps(record))
    outside = outside_dir(tmp_path)
    swap_for_link(path, outside)
    again = await make_braid(data)
    untouched(outside)
    assert not (path / ".git" / journal.INTENT).exists()
    done = await run_turn(again, sid, "write c.txt three")
    assert done["status"] == "COMPLETED"
    untouched(outside)


@pytest.mark.parametrize("rel", ["/etc/x", "../x", "a/../../x", "a//b", "./a", "a/./b", ""])
def test_the_guarded_writer_refuses_paths_that_could_leave(tmp_path: Path, rel: str) -> None:
    with pytest.raises(BraidError):
        guarded.write(tmp_path, rel, b"x")
    assert list(tmp_path.iterdir()) == []


def test_the_guarded_writer_never_follows_a_symlinked_parent(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = outside_dir(tmp_path)
    os.symlink(outside, root / "sub")
    with pytest.raises(guarded.UnsafePath):
        guarded.write(root, "sub/a.txt", b"evil")
    with pytest.raises(guarded.UnsafePath):
        guarded.write(root, "sub/deeper/b.txt", b"evil")
    assert not guarded.delete(root, "sub/a.txt")
    untouched(outside)
    guarded.write(root, "real/a.txt", b"fine")
    assert (root / "real/a.txt").read_bytes() == b"fine"
