"""Idle sessions give back their repository, and the git threads go once quiet (D14): many
sessions busy at once share the git pool's few threads, idle ones are released, at most the
bound stays open, a released session lets go of its repository (objects, open packs) at once,
and it reopens on demand with nothing lost (its deferred index entries written first)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

from conftest import git, new_session, run_turn
from server.app import braid as braid_module
from server.model import body
from server.store import context, session_store


def git_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("braid-git"))


@pytest.mark.slow
async def test_idle_sessions_release_their_threads_and_reopen(make_braid: Any) -> None:
    braid = await make_braid(idle_seconds=0.5, open_sessions=4)
    made = [await new_session(braid) for _ in range(12)]
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, git_threads())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    # Twelve sessions' turns at once: their git work shares the pool, never 12 threads.
    done = await asyncio.gather(*(run_turn(braid, sid, f"write f.txt {i}")
                                  for i, (sid, _) in enumerate(made)))
    watcher.cancel()
    assert [d["status"] for d in done] == ["COMPLETED"] * 12
    assert 1 <= peak <= session_store.GIT_THREADS, peak
    deadline = asyncio.get_running_loop().time() + session_store.IDLE_SECONDS + 20
    while git_threads() > 0 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    assert git_threads() == 0, git_threads()
    assert sum(1 for sid, _ in made if braid.store.get(sid).is_open) == 0
    # Reopened on demand: the next turn works and git tells the truth.
    sid, path = made[0]
    done = await run_turn(braid, sid, "write g.txt again")
    assert done["status"] == "COMPLETED"
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "show", "HEAD:workdir/f.txt") == "0\n"


async def test_at_most_the_bound_stays_open(make_braid: Any) -> None:
    braid = await make_braid(idle_seconds=3600, open_sessions=3)
    for i in range(8):
        sid, _ = await new_session(braid)
        await run_turn(braid, sid, f"write f.txt {i}")
    braid.store.release_idle(3600, 3)
    assert sum(1 for sid in braid.store.all_ids() if braid.store.get(sid).is_open) <= 3


async def until(check: Any) -> None:
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("not reached in 30 s")


def held_files(folder: Path) -> list[str]:
    """Files under `folder` this process holds open or mapped (/proc/self: fds and maps)."""
    inside = str(folder) + "/"
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(inside):
                held.append(target)
    maps = Path("/proc/self/maps").read_text().splitlines()
    return held + [line.split()[-1] for line in maps if inside in line]


async def test_an_idle_session_lets_go_of_its_repository(make_braid: Any) -> None:
    braid = await make_braid(idle_seconds=0.5)
    sid, path = await new_session(braid)
    for i in range(3):
        assert (await run_turn(braid, sid, f"write f{i}.txt {i}"))["status"] == "COMPLETED"
    assert len(context.COSTS) > 0 and len(body.ENCODED) > 0
    # The objects into a pack (loose ones gone), which libgit2 keeps open and mapped.
    git(path, "repack", "-a", "-d", "-q")
    handle = braid.store.get(sid)

    def read_all(git: Any) -> Any:
        def read(tree: Any) -> None:
            for entry in tree:
                obj = git.repo[entry.id]
                if entry.type_str == "tree":
                    read(obj)
                else:
                    obj.data  # noqa: B018 - read from the pack

        for commit in git.repo.walk(git.head_oid()):
            read(commit.tree)
        return git.repo

    repo = weakref.ref(await handle.call(read_all))
    assert held_files(path / ".git"), "the pack should be open while the session is"
    deadline = asyncio.get_running_loop().time() + 30
    while (handle.is_open or repo() is not None or held_files(path / ".git")) \
            and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    assert not handle.is_open
    # Freed with its caches and files when released, not whenever the cyclic GC comes by
    # (a `pygit2.Repository` is in a reference cycle with its `branches`, `references`...).
    assert repo() is None
    assert held_files(path / ".git") == []
    # No session open: the per-message memos of its model calls are emptied too.
    await until(lambda: len(context.COSTS) == len(body.ENCODED) == 0)
    done = await run_turn(braid, sid, "write g.txt reopened")  # reopened on demand
    assert done["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/g.txt") == "reopened\n"


@pytest.mark.slow
async def test_a_quiet_server_gives_memory_back_after_the_teardown_too(make_braid: Any) -> None:
    """The release frees more after it (the pools' threads exit, the sessions' objects go):
    the reaper gives memory back at the release and on the quiet steps after it, then stops
    (issue 11). Each giving back starts with a full collection, which gc.callbacks see."""
    braid = await make_braid(idle_seconds=0.5)
    sid, _ = await new_session(braid)
    assert (await run_turn(braid, sid, "write f.txt 1"))["status"] == "COMPLETED"
    full: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(seen)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        want = 1 + braid_module.TRIMS_AFTER
        while len(full) < want and loop.time() < deadline:
            await asyncio.sleep(0.1)
        assert len(full) == want and not braid.store.open_count()
        await asyncio.sleep(2.0)  # still quiet: no more of them
        assert len(full) == want
    finally:
        gc.callbacks.remove(seen)


@pytest.mark.slow
async def test_a_released_session_keeps_no_handle_nobody_holds(make_braid: Any) -> None:
    """A burst of sessions leaves nothing per session behind once they are released (no
    metadata, lane or path kept: each would pin heap made mid-burst; issue 11), and whoever
    still holds a handle gets that same handle back, so a session never has two lanes."""
    braid = await make_braid(idle_seconds=0.5)
    sid, path = await new_session(braid)
    kept, _ = await new_session(braid)
    for s in (sid, kept):
        assert (await run_turn(braid, s, "write f.txt 1"))["status"] == "COMPLETED"
    gone = weakref.ref(braid.store.get(sid))
    holder = [braid.store.get(kept)]  # a socket's, say
    await until(lambda: not holder[0].is_open and gone() is None)  # released, let go
    assert braid.store.get(kept) is holder[0]  # still held: the same handle and lane
    assert braid.store.open_count() == 0
    # Used again through the handle it held: the session_store keeps it in use, then releases it.
    assert await holder[0].call(lambda git: git.branch) == "main"
    assert holder[0].is_open and braid.store.open_count() == 1
    await until(lambda: not holder[0].is_open)
    assert braid.store.open_count() == 0
    # Let go once nobody holds it either.
    held = weakref.ref(holder.pop())
    await until(lambda: held() is None)
    # A session let go opens again on demand, its metadata read back from session.json.
    assert braid.store.get(sid).meta["session_id"] == sid
    done = await run_turn(braid, sid, "write g.txt later")
    assert done["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/g.txt") == "later\n"
