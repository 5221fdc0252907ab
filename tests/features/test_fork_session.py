"""Fork a session (DESIGN §4): the whole history in a new repository, cheap, with its lineage,
independent of its source afterwards. Checked through the git CLI."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pygit2
import pytest

from conftest import assert_fsck, git, new_session, run_turn
from server.agent import turns
from server.app import recovery
from server.app.braid import Braid
from server.app.reindex import reindex
from server.base.errors import BadRequest, Busy, NotFound
from server.features import fork, sessions, timetravel
from server.store import journal
from server.store.users import DEFAULT_USER
from server.web import params

USER = DEFAULT_USER


def refs(path: Path) -> dict[str, str]:
    out = git(path, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in out.splitlines())


def meta_at(path: Path, rev: str = "HEAD") -> dict[str, Any]:
    return json.loads(git(path, "show", f"{rev}:session.json"))


def state(path: Path) -> tuple[dict[str, str], dict[str, bytes], str]:
    """Refs, working files and status: what must not change in a session's source."""
    files = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*")
             if p.is_file() and ".git" not in p.parts}
    return refs(path), files, git(path, "status", "--porcelain")


async def test_a_fork_carries_the_whole_history_and_shares_objects(braid: Braid) -> None:
    sid, src = await new_session(braid)
    first = await run_turn(braid, sid, "write a.txt one")
    await run_turn(braid, sid, "write b.txt two")
    await timetravel.continue_run_to_end(braid, USER, sid, first["run_id"], continue_from=0,
                                         input="write c.txt sibling")
    git(src, "update-ref", "refs/braid/test-mark", "main")
    (src / "workdir/unsaved.txt").write_text("the user's edit\n")
    source_branch = git(src, "rev-parse", "--abbrev-ref", "HEAD").strip()

    made = await fork.fork_session(braid, USER, sid)
    new_id = made["session_id"]
    dst = braid.store.path(new_id)
    assert made["forked_from_session_id"] == sid and made["root_session_id"] == sid
    # The unsaved edit was committed in the source first, then carried.
    assert git(src, "status", "--porcelain") == ""
    assert (dst / "workdir/unsaved.txt").read_text() == "the user's edit\n"

    src_refs, dst_refs = refs(src), refs(dst)
    assert set(dst_refs) == set(src_refs)
    assert dst_refs["refs/braid/test-mark"] == src_refs["refs/braid/test-mark"]
    for name, oid in src_refs.items():
        if name.startswith("refs/heads/"):
            # Each branch: the source's tip plus one `fork` commit holding the new session.json.
            assert git(dst, "rev-parse", f"{dst_refs[name]}^").strip() == oid
            assert git(dst, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)",
                       dst_refs[name]).strip() == "fork"
            assert git(dst, "diff", "--name-only", oid, dst_refs[name]).split() == \
                ["session.json"]
            assert meta_at(dst, dst_refs[name])["session_id"] == new_id
    assert git(dst, "rev-parse", "--abbrev-ref", "HEAD").strip() == source_branch
    meta = meta_at(dst)
    assert meta["forked_from_session_id"] == sid and meta["root_session_id"] == sid
    assert meta["user_id"] == USER and meta["title"] == "write a.txt one (fork)"
    assert json.loads((dst / "session.json").read_text()) == meta
    # Objects are hard-linked, not rewritten: the same inode in both repositories.
    head_obj = git(src, "rev-parse", "main").strip()
    src_file = src / ".git/objects" / head_obj[:2] / head_obj[2:]
    dst_file = dst / ".git/objects" / head_obj[:2] / head_obj[2:]
    assert os.stat(src_file).st_ino == os.stat(dst_file).st_ino
    # Only the fan-out folders that got objects are made (each made is one more to sync).
    fanouts = [d for d in (dst / ".git/objects").iterdir() if len(d.name) == 2]
    assert fanouts and all(any(d.iterdir()) for d in fanouts)
    assert git(dst, "status", "--porcelain") == ""
    assert_fsck(src)
    assert_fsck(dst)
    # The runs are shared: the fork lists them and reads them.
    src_runs = (await sessions.session_info(braid, USER, sid))["runs"]
    dst_runs = (await sessions.session_info(braid, USER, new_id))["runs"]
    assert dst_runs == src_runs
    got = await sessions.get_run(braid, USER, new_id, first["run_id"])
    assert got["messages"] == first["messages"]


async def test_a_chain_of_forks_has_its_lineage(braid: Braid) -> None:
    root, _ = await new_session(braid)
    await run_turn(braid, root, "say root")
    mid = (await fork.fork_session(braid, USER, root))["session_id"]
    leaf_made = await fork.fork_session(braid, USER, mid)
    leaf = leaf_made["session_id"]
    assert leaf_made == {"session_id": leaf, "forked_from_session_id": mid,
                         "root_session_id": root, "title": "say root (fork 2)"}
    expected = {root: (None, root), mid: (root, root), leaf: (mid, root)}
    for session_id, (parent, first) in expected.items():
        meta = meta_at(braid.store.path(session_id))
        assert (meta["forked_from_session_id"], meta["root_session_id"]) == (parent, first)
        info = await sessions.session_info(braid, USER, session_id)
        assert (info["forked_from_session_id"], info["root_session_id"]) == (parent, first)
    rows = {r["session_id"]: r for r in await sessions.list_sessions(braid, USER)}
    assert (rows[leaf]["forked_from_session_id"], rows[leaf]["root_session_id"]) == (mid, root)
    # Git is the truth: a rebuilt index has the same lineage and runs.
    await reindex(braid)
    again = {r["session_id"]: r for r in await sessions.list_sessions(braid, USER)}
    assert (again[leaf]["forked_from_session_id"], again[leaf]["root_session_id"]) == \
        (mid, root)
    assert len((await sessions.session_info(braid, USER, leaf))["runs"]) == 1


async def test_work_in_either_never_changes_the_other(braid: Braid) -> None:
    sid, src = await new_session(braid)
    shared = await run_turn(braid, sid, "write a.txt one")
    new_id = (await fork.fork_session(braid, USER, sid))["session_id"]
    dst = braid.store.path(new_id)
    src_before = state(src)
    # In the fork: a new turn, a fork of a shared run, a checkout.
    await run_turn(braid, new_id, "write b.txt fork-only\nappend a.txt more")
    sibling = await timetravel.continue_run_to_end(braid, USER, new_id, shared["run_id"],
                                                   continue_from=0, input="write c.txt x")
    await sessions.checkout(braid, USER, new_id, "main")
    assert state(src) == src_before
    assert (src / "workdir/a.txt").read_text() == "one\n"
    src_runs = (await sessions.session_info(braid, USER, sid))["runs"]
    assert [r["run_id"] for r in src_runs] == [shared["run_id"]]
    assert (await sessions.get_run(braid, USER, sid, shared["run_id"]))["messages"] == \
        shared["messages"]
    with pytest.raises(NotFound):
        await sessions.get_run(braid, USER, sid, sibling["run_id"])
    # And the other way round.
    dst_before = state(dst)
    await run_turn(braid, sid, "write z.txt source-only")
    assert state(dst) == dst_before
    assert not (dst / "workdir/z.txt").exists()
    assert_fsck(src)
    assert_fsck(dst)


async def test_only_the_owner_may_fork(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say mine")
    before = sorted(p.name for p in braid.store.root.iterdir())
    with pytest.raises(NotFound):
        await fork.fork_session(braid, "someone-else", sid)
    for unknown in ("0" * 32, "nope"):
        with pytest.raises(NotFound):
            await fork.fork_session(braid, USER, unknown)
    for malformed in (None, 5):  # the transports' parsing refuses it before any call
        with pytest.raises(BadRequest):
            params.session_id(malformed)
    assert sorted(p.name for p in braid.store.root.iterdir()) == before
    assert len(await sessions.list_sessions(braid, USER)) == 1


async def test_forking_during_a_run_is_busy(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    run_id = await turns.send_message(braid, USER, sid, "slow 60\nsay a b c d e")
    before = sorted(p.name for p in braid.store.root.iterdir())
    with pytest.raises(Busy):
        await fork.fork_session(braid, USER, sid)
    assert sorted(p.name for p in braid.store.root.iterdir()) == before
    active = braid.runs.find(sid, run_id)
    assert active is not None
    await active.done.wait()
    assert (await fork.fork_session(braid, USER, sid))["forked_from_session_id"] == sid


def test_link_objects_names_what_it_linked(tmp_path: Path) -> None:
    """A fork syncs the files it linked by their folders only (their data is the source's,
    synced when written): `link_objects` names exactly those, not a temporary file, and
    makes no empty fan-out folder (issue 30)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "ab").mkdir(parents=True)
    (src / "cd").mkdir()  # empty: not made in the fork
    (src / "pack").mkdir()
    (src / "ab" / "0123").write_bytes(b"loose")
    (src / "ab" / "tmp_obj_x").write_bytes(b"half")
    (src / "pack" / "pack-1.pack").write_bytes(b"pack")
    (src / "pack" / "pack-1.idx").write_bytes(b"idx")
    (src / "pack" / "tmp_pack_y").write_bytes(b"half")
    (dst / "pack").mkdir(parents=True)
    linked = fork.link_objects(src, dst)
    assert sorted(linked) == sorted(str(dst / p) for p in
                                    ("ab/0123", "pack/pack-1.pack", "pack/pack-1.idx"))
    assert not (dst / "cd").exists() and not (dst / "ab" / "tmp_obj_x").exists()
    assert all(os.stat(p).st_nlink == 2 for p in linked)


async def test_a_fork_cut_before_it_was_whole_leaves_no_index_rows(braid: Braid) -> None:
    """A fork writes the runs and search rows it shares while its folder is synced (issue
    30), and its session row only once the folder is whole. A power cut in between leaves a
    half-made folder: start-up removes it, and its rows with it."""
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say zebra quokka")
    new_id = (await fork.fork_session(braid, USER, sid))["session_id"]
    assert await braid.index.list_runs(new_id)
    assert {h["session_id"] for h in await braid.search.search(USER, "quokka", 10)} == \
        {sid, new_id}
    # What a cut during the sync can leave: the marker, a file's name without its data.
    journal.begin_folder(braid.store.root, new_id, "fork")
    (braid.store.path(new_id) / "session.json").write_bytes(b"")
    await recovery.recover_operations(braid)
    assert not braid.store.path(new_id).exists()
    assert await braid.index.list_runs(new_id) == []
    assert {h["session_id"] for h in await braid.search.search(USER, "quokka", 10)} == {sid}
    assert [s["session_id"] for s in await sessions.list_sessions(braid, USER)] == [sid]


async def test_a_file_that_became_a_fifo_is_checked_out_not_waited_on(braid: Braid) -> None:
    """The working tree is copied file by file as the index names them (issue 30: plain
    calls, not shutil). A file turned into a FIFO after it was staged (what a process left
    running could do) must not hang the copy: it is refused, and the fork checks out."""
    sid, src = await new_session(braid)
    await run_turn(braid, sid, "write a.txt one")
    await run_turn(braid, sid, "write b.txt two")
    handle = braid.store.get(sid)

    def copy(gs: Any) -> str:
        (src / "workdir/a.txt").unlink()
        os.mkfifo(src / "workdir/a.txt")
        target = braid.store.root / "copy-target"
        fork.init_unsynced(target, "main")
        fork.write_forked_refs(gs, target, b"{}", sid)
        try:
            fork.copy_worktree(gs, pygit2.Repository(str(target)), target, b"{}")
        except OSError as e:
            return str(e)
        return "copied"

    done = await asyncio.wait_for(handle.call(copy), timeout=30)
    assert "workdir/a.txt" in done and "not a regular file" in done
