"""Sub-agents through the core `Braid` object: each runs on its own `sub_…` branch in its own
git worktree, against the demo model through the real openai client; the session repositories
are checked with the git CLI."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, run_to_end
from server.app.braid import Braid
from server.app.reindex import reindex
from server.base.errors import BadRequest, Busy, Conflict, NotFound
from server.features import dag, search, sessions, subagents
from server.git.session import GitSession
from server.store import atomic

USER = "local"


async def session_with_turn(braid: Braid, text: str = "write base.txt base") -> tuple[
        str, Path, str]:
    sid = (await sessions.create_session(braid, USER))["session_id"]
    run = await run_to_end(braid, USER, sid, text)
    assert run["status"] == "COMPLETED"
    return sid, braid.store.path(sid), run["run_id"]


def trailers(path: Path, rev: str) -> dict[str, str]:
    out = git(path, "log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def tree_files(path: Path, rev: str, folder: str) -> list[str]:
    return git(path, "ls-tree", "-r", "--name-only", rev, folder).split()


def worktrees(path: Path) -> list[str]:
    return [line for line in git(path, "worktree", "list").splitlines() if line.strip()]


async def test_spawn_red_then_blue_keeps_both_branches_and_reports_in_the_parent(
        braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    red = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say red")
    blue = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say blue", "second")
    assert (red["final_text"], blue["final_text"]) == ("red", "blue")
    assert red["status"] == blue["status"] == "COMPLETED"
    assert red["branch"].startswith(f"sub_{turn_id[:10]}_agent_")
    assert blue["branch"].startswith(f"sub_{turn_id[:10]}_second_")
    assert len(red["branch"].rsplit("_", 1)[1]) == 8
    # Both branches kept, each tip the commit the action named; no worktree left.
    branches = git(path, "branch", "--list", "sub_*", "--format=%(refname:short) %(objectname)")
    assert sorted(branches.split("\n")[:-1]) == sorted(
        [f"{red['branch']} {red['commit_id']}", f"{blue['branch']} {blue['commit_id']}"])
    assert len(worktrees(path)) == 1
    assert not (path / "_worktrees" / red["branch"]).exists()
    assert git(path, "status", "--porcelain") == ""

    # The parent got two assistant messages (not tool rows) naming branch and commit.
    history = [json.loads(git(path, "show", f"main:{f}"))
               for f in tree_files(path, "main", "history/")]
    summaries = [m for m in history if m.get("sub_agent")]
    assert [m["role"] for m in summaries] == ["assistant", "assistant"]
    for msg, result in zip(summaries, (red, blue), strict=True):
        assert result["branch"] in msg["content"] and result["commit_id"] in msg["content"]
        assert msg["content"].rstrip().endswith(result["final_text"])
        assert msg["sub_agent"]["commit_id"] == result["commit_id"]
    last = trailers(path, "main")
    assert last["Braid-Kind"] == "sub-agent" and last["Braid-Run"] == blue["summary_run_id"]
    record = json.loads(git(path, "show", f"main:runs/000/00/{blue['summary_run_id']}.json"))
    assert record["status"] == "COMPLETED" and record["parent_run_id"] == turn_id

    # A child's branch starts with a `sub-agent` commit that drops the parent's history and
    # runs; from then on it holds only its own conversation.
    start = git(path, "rev-list", "--reverse", f"main..{red['branch']}").split()[0]
    assert trailers(path, start)["Braid-Kind"] == "sub-agent"
    assert git(path, "rev-parse", f"{start}^").strip() == git(
        path, "merge-base", "main", red["branch"]).strip()
    assert tree_files(path, start, "history/") == tree_files(path, start, "runs/") == []
    assert tree_files(path, start, "workdir/") == ["workdir/base.txt"]
    child = [json.loads(git(path, "show", f"{red['branch']}:{f}"))
             for f in tree_files(path, red["branch"], "history/")]
    assert [(m["role"], m["content"]) for m in child] == [("user", "say red"),
                                                         ("assistant", "red")]
    assert [f.split("/")[-1] for f in tree_files(path, red["branch"], "runs/")] == [
        f"{red['run_id']}.json"]
    run = await sessions.get_run(braid, USER, sid, red["run_id"])
    assert run["branch"] == red["branch"] and run["parent_run_id"] == turn_id
    info = await sessions.session_info(braid, USER, sid)
    statuses = {r["run_id"]: (r["status"], r["branch"]) for r in info["runs"]}
    assert statuses[red["run_id"]] == ("COMPLETED", red["branch"])
    assert info["branch"] == "main"
    assert_fsck(path)


@pytest.mark.slow
async def test_two_slow_sub_agents_run_at_the_same_time_on_their_own_files(
        braid: Braid, capsys: pytest.CaptureFixture[str]) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    before = git(path, "rev-parse", "main:workdir").strip()
    prompts = ["slow 60\nwrite red.txt red\nsay red", "slow 60\nwrite blue.txt blue\nsay blue"]
    started = time.perf_counter()
    red, blue = await asyncio.gather(*(
        subagents.spawn_sub_agent(braid, USER, sid, turn_id, p, label)
        for p, label in zip(prompts, ("red", "blue"), strict=True)))
    both = time.perf_counter() - started
    started = time.perf_counter()
    await subagents.spawn_sub_agent(braid, USER, sid, turn_id, prompts[0], "again")
    one = time.perf_counter() - started
    with capsys.disabled():
        print(f"\n  two slow sub-agents together: {both:.2f} s; one alone: {one:.2f} s")
    assert (red["final_text"], blue["final_text"]) == ("red", "blue")
    assert git(path, "show", f"{red['branch']}:workdir/red.txt") == "red\n"
    assert git(path, "show", f"{blue['branch']}:workdir/blue.txt") == "blue\n"
    assert "workdir/blue.txt" not in tree_files(path, red["branch"], "workdir/")
    assert "workdir/red.txt" not in tree_files(path, blue["branch"], "workdir/")
    # The parent's files are untouched until a merge.
    assert git(path, "rev-parse", "main:workdir").strip() == before
    assert sorted(p.name for p in (path / "workdir").iterdir()) == ["base.txt"]
    assert len(worktrees(path)) == 1
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_events_tell_the_story_and_the_run_stays_out_of_the_parent_branch(
        braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    queue = braid.bus.subscribe(sid)
    result = await subagents.spawn_sub_agent(braid, USER, sid, turn_id,
                                             "write notes/x.txt hi", "notes")
    events = []
    while not queue.empty():
        frame = queue.get_nowait()
        events.append((frame["event"], frame["data"]))
    names = [e for e, _ in events]
    assert names.index("sub_agent_started") < names.index("run_started") \
        < names.index("run_completed") < names.index("sub_agent_done")
    assert "tool_call" in names and "dag_changed" in names
    started = dict(events)["run_started"]
    assert started["branch"] == result["branch"]
    assert started["run"]["sub_agent"]["parent_turn_id"] == turn_id
    done = dict(events)["sub_agent_done"]
    assert done["final_text"] == "done: wrote notes/x.txt" == result["final_text"]
    assert done["summary"]["message"]["role"] == "assistant"
    assert done["commit_id"] == result["commit_id"]
    # The parent branch holds the result message, never the child's own messages.
    view = await sessions.transcript(braid, USER, sid)
    texts = [p.get("content") for t in view["turns"] for p in t.get("parts", [])]
    assert "done: wrote notes/x.txt" not in texts
    assert any(result["branch"] in (t or "") for t in texts)


async def test_user_edits_are_committed_before_branching_and_tools_stay_in_the_worktree(
        braid: Braid, tmp_path: Path) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    (path / "workdir" / "mine.txt").write_text("edited by hand\n")
    result = await subagents.spawn_sub_agent(
        braid, USER, sid, turn_id,
        "read mine.txt\nwrite ../escape.txt no\nwrite ../../escape.txt no\nsay checked")
    assert result["final_text"] == "checked"
    assert trailers(path, "main~1")["Braid-Kind"] == "user-edit"
    assert git(path, "show", "main~1:workdir/mine.txt") == "edited by hand\n"
    assert git(path, "show", f"{result['branch']}:workdir/mine.txt") == "edited by hand\n"
    child = [json.loads(git(path, "show", f"{result['branch']}:{f}"))
             for f in tree_files(path, result["branch"], "history/")]
    tools = [m for m in child if m["role"] == "tool"]
    assert tools[0]["content"] == "edited by hand\n"
    assert all(m.get("is_error") for m in tools[1:])
    assert not list(path.rglob("escape.txt")) and not (path.parent / "escape.txt").exists()
    assert_fsck(path)


async def test_bad_input_is_refused_and_changes_nothing(braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    head = git(path, "rev-parse", "HEAD")
    def spawn(parent: object, prompt: object, label: object = None) -> Any:
        return call_action(braid, USER, sid, "spawn_sub_agent", parent_turn_id=parent,
                           prompt=prompt, label=label)

    with pytest.raises(NotFound):
        await spawn("f" * 32, "say x")
    # A string that cannot be a turn id names no turn: not_found, as for every action
    # (docs/DESIGN.md "Malformed and unknown ids"); a number is malformed.
    with pytest.raises(NotFound):
        await spawn("not-an-id", "say x")
    with pytest.raises(BadRequest):
        await spawn(7, "say x")
    with pytest.raises(BadRequest):
        await spawn(turn_id, "   ")
    with pytest.raises(BadRequest):
        await spawn(turn_id, ["say x"])
    with pytest.raises(BadRequest):
        await spawn(turn_id, "say x", 7)
    with pytest.raises(NotFound):
        await subagents.spawn_sub_agent(braid, "someone-else", sid, turn_id, "say x")
    with pytest.raises(NotFound):
        await subagents.spawn_sub_agent(braid, USER, "0" * 32, turn_id, "say x")
    assert git(path, "rev-parse", "HEAD") == head
    assert git(path, "branch", "--list", "sub_*") == ""
    assert braid.runs.for_session(sid) == [] and await braid.locks.held(sid) == set()
    # A label becomes a safe branch part: no slash (worktree names cannot hold one).
    result = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say ok", "a/b c_d")
    assert result["branch"].split("_")[2] == "a-b-c-d"


async def test_a_busy_sub_agent_branch_refuses_a_second_run_and_cancel_ends_it(
        braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    queue = braid.bus.subscribe(sid)
    task = asyncio.create_task(subagents.spawn_sub_agent(
        braid, USER, sid, turn_id, "slow 200\nsay " + " ".join(["word"] * 30), "slowpoke"))
    started = None
    while started is None:
        frame = await asyncio.wait_for(queue.get(), 20)
        if frame["event"] == "sub_agent_started":
            started = frame["data"]
    with pytest.raises(Busy):
        await braid.locks.acquire(sid, started["branch"])
    # The parent branch is free meanwhile: a turn runs there while the child works.
    parent = await run_to_end(braid, USER, sid, "say meanwhile")
    assert parent["status"] == "COMPLETED"
    # The live worktree is in `git worktree list` but never in the parent's commits or status.
    assert len(worktrees(path)) == 2 and (path / "_worktrees" / started["branch"]).is_dir()
    assert not [f for f in git(path, "ls-tree", "-r", "--name-only", "HEAD").split()
                if f.startswith("_worktrees")]
    assert git(path, "status", "--porcelain") == ""
    from server.agent import turns

    await turns.cancel_run(braid, USER, sid, started["run_id"])
    result = await asyncio.wait_for(task, 20)
    assert result["status"] == "CANCELLED"
    assert len(worktrees(path)) == 1
    history = [json.loads(git(path, "show", f"main:{f}"))
               for f in tree_files(path, "main", "history/")]
    assert "stopped (cancelled)" in history[-1]["content"]
    assert history[-2]["content"] == "meanwhile"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_a_worktree_left_by_a_dead_server_is_committed_and_pruned(
        braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    handle = braid.store.get(sid)

    def leave_one(git_: GitSession) -> str:
        sub = subagents.open_sub_branch(git_, "sub_dead_x_00000000", "x", "say x", True, set())
        (sub.path / "workdir" / "half.txt").write_text("half done\n")
        return str(sub.path)

    folder = Path(await handle.call(leave_one))
    assert len(worktrees(path)) == 2
    await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say next")
    assert len(worktrees(path)) == 1 and not folder.exists()
    # Nothing is lost: what the dead run left is on its branch.
    assert git(path, "show", "sub_dead_x_00000000:workdir/half.txt") == "half done\n"
    assert_fsck(path)


def test_a_result_lands_on_its_branch_even_when_another_is_checked_out(tmp_path: Path) -> None:
    git_ = GitSession.create(tmp_path / "s", {"session_id": "s" * 32, "title": "t",
                                              "user_id": USER, "created_at": "now"})
    main_tip = git_.head_oid()
    git_.create_branch("other", main_tip)
    atomic.checkout(git_, "other")
    info = {"branch": "sub_x", "label": "x", "run_id": "r" * 32, "status": "COMPLETED",
            "final_text": "it worked", "commit_id": "c" * 40}
    summary = subagents.write_result(git_, "main", "s" * 32, "p" * 32, info)
    path = tmp_path / "s"
    assert git(path, "rev-parse", "main").strip() == summary["commit_id"]
    assert git(path, "rev-parse", "main^").strip() == str(main_tip)
    assert git(path, "rev-parse", "other").strip() == str(main_tip)
    assert git(path, "symbolic-ref", "--short", "HEAD").strip() == "other"
    assert not (path / "history").exists()  # the working tree (branch other) is untouched
    assert "it worked" in git(path, "show", f"main:{tree_files(path, 'main', 'history/')[0]}")
    assert_fsck(path)



@pytest.mark.slow
async def test_a_failing_sub_agent_reports_its_error_in_the_parent(braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    result = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "fail boom", "bad")
    assert result["status"] == "ERROR" and result["final_text"] == ""
    last = json.loads(git(path, "show", f"main:{tree_files(path, 'main', 'history/')[-1]}"))
    assert "stopped (error)" in last["content"] and "boom" in last["content"]
    record = json.loads(git(path, "show",
                            f"{result['branch']}:runs/000/00/{result['run_id']}.json"))
    assert record["status"] == "ERROR"
    assert len(worktrees(path)) == 1
    assert_fsck(path)


async def test_a_result_carries_the_childs_files_as_chips_with_their_diff(
        braid: Braid) -> None:
    sid, path, turn_id = await session_with_turn(braid)
    result = await subagents.spawn_sub_agent(braid, USER, sid, turn_id,
                                             "write new.txt hello\nwrite base.txt changed\nsay ok",
                                             "writer")
    assert result["files"] == [{"path": "base.txt", "status": "modified"},
                               {"path": "new.txt", "status": "added"}]
    # In the parent's transcript, the result's turn shows the child's files...
    page = await sessions.transcript(braid, USER, sid)
    summary = next(t for t in page["turns"] if t.get("run_id") == result["summary_run_id"])
    assert summary["files"] == result["files"]
    # ...and a chip's diff is the child's change, read on the child's branch.
    diff = await call_action(braid, USER, sid, "turn_diff",
                             turn_id=result["summary_run_id"], path="new.txt")
    assert "+hello" in diff["diff"] and diff["paths"] == [{"path": "new.txt",
                                                           "status": "added"}]
    assert not (path / "workdir" / "new.txt").exists()  # the parent's files are its own


async def test_a_finished_child_s_branch_is_removed_with_its_runs_and_nothing_else(
        braid: Braid) -> None:
    """Finished children's branches stay readable until removed (issue 34): Remove takes the
    branch, its commits out of the graph and its runs out of the index and search; the
    parent's result stays, the repo stays valid. A branch shown, a run going on, or a branch
    not a child's is refused with a clear error, and another user cannot touch it."""
    sid, path, turn_id = await session_with_turn(braid)
    red = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say scarlet red")
    blue = await subagents.spawn_sub_agent(braid, USER, sid, turn_id, "say blue", "second")
    with pytest.raises(BadRequest, match="not a sub-agent's branch"):
        await call_action(braid, USER, sid, "remove_sub_branch", branch="main")
    with pytest.raises(NotFound):
        await call_action(braid, "intruder", sid, "remove_sub_branch", branch=red["branch"])
    with pytest.raises(NotFound):
        await call_action(braid, USER, sid, "remove_sub_branch", branch="sub_nothing_here_0")
    # Shown: refused, then removable once another branch is shown.
    await call_action(braid, USER, sid, "checkout", ref=blue["branch"])
    with pytest.raises(Conflict, match="is shown"):
        await call_action(braid, USER, sid, "remove_sub_branch", branch=blue["branch"])
    await call_action(braid, USER, sid, "checkout", ref="main")
    # Running in the session: refused (a model's children wait on branches made already).
    queue = braid.bus.subscribe(sid)
    slow = asyncio.create_task(subagents.spawn_sub_agent(
        braid, USER, sid, turn_id, "slow 200\nsay " + " ".join(["word"] * 30), "slowpoke"))
    while (await asyncio.wait_for(queue.get(), 20))["event"] != "sub_agent_started":
        pass
    with pytest.raises(Busy, match="a run is going on"):
        await call_action(braid, USER, sid, "remove_sub_branch", branch=red["branch"])
    await asyncio.wait_for(slow, 60)

    removed = await call_action(braid, USER, sid, "remove_sub_branch", branch=red["branch"])
    assert removed == {"branch": red["branch"], "run_ids": [red["run_id"]]}
    names = git(path, "branch", "--format=%(refname:short)").split()
    assert red["branch"] not in names and blue["branch"] in names and "main" in names
    assert_fsck(path)
    assert git(path, "status", "--porcelain") == ""
    # Out of the graph, the index and search; the parent's result (on main) stays.
    graph = await dag.get_dag(braid, USER, sid)
    assert red["branch"] not in {b["name"] for b in graph["branches"]}
    assert red["commit_id"] not in {n["id"] for n in graph["nodes"]}
    assert red["run_id"] not in {r["run_id"] for r in await braid.index.list_runs(sid)}
    hits = (await search.search(braid, USER, "scarlet"))["results"]
    assert [h["run_id"] for h in hits] == [red["summary_run_id"]]
    with pytest.raises(NotFound):
        await sessions.get_run(braid, USER, sid, red["run_id"])
    with pytest.raises(NotFound):  # gone already
        await call_action(braid, USER, sid, "remove_sub_branch", branch=red["branch"])
    # The index agrees with git after a rebuild from git alone.
    before = sorted(r["run_id"] for r in await braid.index.list_runs(sid))
    await reindex(braid)
    assert sorted(r["run_id"] for r in await braid.index.list_runs(sid)) == before
