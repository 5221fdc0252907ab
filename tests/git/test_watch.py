"""User edits are found in O(changed files) by the session's file watcher (watch.py), with a
full scan at the first look or when the watcher cannot answer; only under workdir/."""

from __future__ import annotations

import os
import shutil
from typing import Any

from conftest import git, new_session, run_turn
from server.git.workdir.watch import WATCHERS


def changed(path: Any, rev: str) -> list[str]:
    return sorted(git(path, "diff-tree", "--no-commit-id", "--name-only", "-r", rev).split())


def kind(path: Any, rev: str) -> str:
    return git(path, "log", "-1", "--format=%B", rev).split("Braid-Kind: ")[1].split()[0]


async def test_edits_between_turns_are_committed_as_user_edit(braid: Any) -> None:
    sid, path = await new_session(braid)
    work = path / "workdir"
    (work / "keep").mkdir()
    for i in range(5):
        (work / "keep" / f"f{i}.txt").write_text(f"{i}\n")
    await run_turn(braid, sid, "say first")  # the first look: a full scan
    assert kind(path, "HEAD~1") == "user-edit"
    assert changed(path, "HEAD~1") == [f"workdir/keep/f{i}.txt" for i in range(5)]
    handle = braid.store.get(sid)
    assert await handle.call(
        lambda g: g.scan._watcher is not None and not g.scan._watcher.closed)

    # Watched from now on: a change, a deletion, a new nested folder, an executable bit.
    (work / "keep" / "f1.txt").write_text("changed\n")
    (work / "keep" / "f2.txt").unlink()
    os.makedirs(work / "new" / "deep")
    (work / "new" / "deep" / "x.txt").write_text("x\n")
    os.chmod(work / "keep" / "f3.txt", 0o755)
    (path / "outside.txt").write_text("not in workdir\n")
    done = await run_turn(braid, sid, "write a.txt agent")
    assert done["status"] == "COMPLETED"
    assert kind(path, "HEAD~2") == "user-edit"
    assert changed(path, "HEAD~2") == ["workdir/keep/f1.txt", "workdir/keep/f2.txt",
                                       "workdir/keep/f3.txt", "workdir/new/deep/x.txt"]
    assert git(path, "status", "--porcelain") == "?? outside.txt\n"
    (path / "outside.txt").unlink()

    # The agent's own writes are not user edits; a folder removed is.
    shutil.rmtree(work / "new")
    await run_turn(braid, sid, "say again")
    assert kind(path, "HEAD~1") == "user-edit"
    assert changed(path, "HEAD~1") == ["workdir/new/deep/x.txt"]
    await run_turn(braid, sid, "say nothing changed")
    assert kind(path, "HEAD~1") == "turn"  # no user edit between these two turns
    assert git(path, "status", "--porcelain") == ""


async def test_a_closed_watcher_falls_back_on_a_full_scan(braid: Any) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "say first")
    handle = braid.store.get(sid)
    watcher = await handle.call(lambda g: g.scan._watcher)
    WATCHERS.forget(watcher)  # as when more sessions are open than watchers are kept
    (path / "workdir" / "late.txt").write_text("edited while unwatched\n")
    await run_turn(braid, sid, "say second")
    assert kind(path, "HEAD~1") == "user-edit"
    assert changed(path, "HEAD~1") == ["workdir/late.txt"]
    assert await handle.call(lambda g: g.scan._watcher is not watcher)
    assert git(path, "status", "--porcelain") == ""


async def test_many_files_dropped_in_are_one_user_edit(braid: Any) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "say first")
    for i in range(400):
        d = path / "workdir" / "lib" / f"m{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_text(f"x = {i}\n")
    await run_turn(braid, sid, "say after")
    assert kind(path, "HEAD~1") == "user-edit"
    assert len(changed(path, "HEAD~1")) == 400
    assert git(path, "status", "--porcelain") == ""


def counts(path: Any) -> dict[str, int]:
    out = git(path, "count-objects", "-v")
    return {k: int(v) for k, v in (line.split(": ") for line in out.splitlines())
            if v.isdigit()}


async def test_a_big_first_snapshot_writes_its_blobs_as_one_pack(braid: Any) -> None:
    sid, path = await new_session(braid)
    work = path / "workdir"
    for i in range(400):  # more than BULK_EDITS, found by the first look's full scan
        d = work / "pkg" / f"m{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_text(f"x = {i}\n")
    os.chmod(work / "pkg" / "m0" / "f0.py", 0o755)
    os.symlink("m0/f1.py", work / "pkg" / "link")
    (work / ".gitignore").write_text("*.log\n")
    (work / "pkg" / "noise.log").write_text("ignored\n")
    (work / "pkg" / ".~braid-1.tmp").write_text("a killed writer's temporary file\n")
    loose_before = counts(path)["count"]
    await run_turn(braid, sid, "say first")
    assert kind(path, "HEAD~1") == "user-edit"
    files = changed(path, "HEAD~1")
    assert len(files) == 402 and "workdir/pkg/noise.log" not in files
    assert not any(".~braid-" in f for f in files)
    listed = git(path, "ls-tree", "-r", "HEAD", "workdir/pkg/m0/f0.py", "workdir/pkg/link")
    modes = {line.split("\t")[1]: line.split()[0] for line in listed.splitlines()}
    assert modes == {"workdir/pkg/m0/f0.py": "100755", "workdir/pkg/link": "120000"}
    assert git(path, "cat-file", "-p", "HEAD:workdir/pkg/m3/f399.py") == "x = 399\n"
    # The blobs are in a pack: only the trees, messages and commits are loose.
    after = counts(path)
    assert after["in-pack"] >= 400 and after["count"] - loose_before < 50
    git(path, "fsck", "--strict")
    assert git(path, "status", "--porcelain") == ""  # the temporary file is excluded

    # A second bulk change seen by the watcher: changes and deletions together.
    (work / "pkg" / ".~braid-1.tmp").unlink()
    for i in range(0, 400, 2):
        (work / "pkg" / f"m{i // 100}" / f"f{i}.py").write_text(f"x = {i} + 1\n")
    for i in range(1, 400, 4):
        (work / "pkg" / f"m{i // 100}" / f"f{i}.py").unlink()
    await run_turn(braid, sid, "say second")
    assert kind(path, "HEAD~1") == "user-edit"
    assert len(changed(path, "HEAD~1")) == 300
    assert git(path, "cat-file", "-p", "HEAD:workdir/pkg/m0/f2.py") == "x = 2 + 1\n"
    assert "workdir/pkg/m0/f1.py" not in git(path, "ls-tree", "-r", "--name-only", "HEAD")
    git(path, "fsck", "--strict")
    assert git(path, "status", "--porcelain") == ""


async def test_a_name_that_is_not_utf8_never_stops_the_watching_for_good(braid: Any) -> None:
    """watchfiles cannot decode such a name and gives up (issue 21 row 6): the look falls back
    on one full scan, a new watcher takes over, and the names it finds are only listed."""
    sid, path = await new_session(braid)
    work = path / "workdir"
    handle = braid.store.get(sid)
    await run_turn(braid, sid, "say first")  # the first look: the watcher opens
    first = await handle.call(lambda g: g.scan._watcher)
    assert first is not None and not first.closed
    (work / os.fsdecode(b"bad\xff.txt")).write_text("b")
    (work / "good.txt").write_text("g")
    done = await run_turn(braid, sid, "write a.txt agent")
    assert done["status"] == "COMPLETED", done
    assert changed(path, "HEAD~2") == ["workdir/good.txt"]
    assert first.closed  # watchfiles gave up on that name ...
    # ... and a new watcher answers the next looks, with the odd name carried along.
    (work / "later.txt").write_text("l")
    again = await run_turn(braid, sid, "write b.txt agent")
    assert again["status"] == "COMPLETED", again
    assert changed(path, "HEAD~2") == ["workdir/later.txt"]
    second = await handle.call(lambda g: g.scan._watcher)
    assert second is not None and second is not first and not second.closed
    (work / os.fsdecode(b"bad\xff.txt")).write_text("changed")  # kills the second one too
    (work / "last.txt").write_text("z")
    third = await run_turn(braid, sid, "write c.txt agent")
    assert third["status"] == "COMPLETED", third
    assert changed(path, "HEAD~2") == ["workdir/last.txt"]
    assert git(path, "show", "HEAD:workdir/c.txt") == "agent\n"
    assert git(path, "status", "--porcelain", "--untracked-files=all") == \
        '?? "workdir/bad\\377.txt"\n'
