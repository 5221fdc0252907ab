"""The agent branches itself (agent/orchestrate.py): the model's `spawn_sub_agents` and
`merge_branches` tools, driven by the demo model's `spawn LABEL: PROMPT` and `merge STRATEGY`
lines through the real openai client, on the core `Braid`; repositories checked with the git
CLI."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, new_session, run_to_end
from server.agent.turns import cancel_run, send_message
from server.features import revert, sessions

USER = "local"


class Watch:
    """Every event of a session, with the time it was published."""

    def __init__(self, braid: Any, sid: str) -> None:
        self.queue = braid.bus.subscribe(sid)
        self.seen: list[tuple[float, str, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            frame = await self.queue.get()
            self.seen.append((time.monotonic(), frame["event"], dict(frame["data"])))

    def of(self, event: str) -> list[dict[str, Any]]:
        return [d for _, e, d in self.seen if e == event]

    def spans(self) -> dict[str, tuple[float, float]]:
        """Each child's run: from its `sub_agent_started` to its `sub_agent_done`."""
        start = {d["run_id"]: t for t, e, d in self.seen if e == "sub_agent_started"}
        end = {d["run_id"]: t for t, e, d in self.seen if e == "sub_agent_done"}
        return {r: (start[r], end[r]) for r in start if r in end}

    async def until(self, event: str, count: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.of(event)) < count:
            assert time.monotonic() < deadline, f"no {count} {event} events"
            await asyncio.sleep(0.02)


def most_at_once(spans: dict[str, tuple[float, float]]) -> int:
    points = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    now = peak = 0
    for _, step in points:
        now += step
        peak = max(peak, now)
    return peak


def tool_result(run: dict[str, Any], name: str) -> Any:
    calls = {c["id"]: c["function"]["name"] for m in run["messages"]
             for c in m.get("tool_calls") or ()}
    found = [m for m in run["messages"] if m["role"] == "tool"
             and calls.get(m.get("tool_call_id")) == name]
    text = found[-1]["content"]
    return text if text.startswith("error:") else json.loads(text)


def slow_child(label: str, words: int = 6, ms: int = 60) -> str:
    return f"spawn {label}: write {label}.txt {label}\\nslow {ms}\\nsay " + \
        " ".join([label] * words)


async def test_two_children_run_at_once_and_their_merge_is_one_multi_parent_commit(
        braid: Any) -> None:
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    run = await run_to_end(braid, USER, sid, "write base.txt base\n"
                                    + slow_child("red") + "\n" + slow_child("blue")
                                    + "\nmerge fail")
    assert run["status"] == "COMPLETED", run
    spawned = tool_result(run, "spawn_sub_agents")
    agents = spawned["agents"]
    assert [a["label"] for a in agents] == ["red", "blue"]
    assert all(a["status"] == "COMPLETED" for a in agents)
    assert agents[0]["final_text"] == " ".join(["red"] * 6)
    assert agents[0]["files"] == [{"path": "red.txt", "status": "added"}]
    assert run["messages"][-1]["content"] == "merged: " + "; ".join(
        a["final_text"] for a in agents)
    # Parallel: the two children's runs overlap.
    assert most_at_once(watch.spans()) == 2
    # Each child branched from the parent's checkpoint: base.txt is in its first commit.
    for a in agents:
        assert a["branch"].startswith(f"sub_{run['run_id'][:10]}_{a['label']}_")
        assert "workdir/base.txt" in git(path, "ls-tree", "-r", "--name-only",
                                         f"{a['branch']}~2").split()
        assert git(path, "rev-parse", a["branch"]).strip() == a["commit_id"]
    # The merge: one commit whose parents are main's previous tip and both children's tips.
    merged = tool_result(run, "merge_branches")
    parents = git(path, "log", "-1", "--format=%P", merged["commit_id"]).split()
    assert parents == merged["parent_ids"]
    assert parents[1:] == [a["commit_id"] for a in agents]
    assert git(path, "log", "--merges", "--format=%H", "main").split() == [merged["commit_id"]]
    assert sorted(p.name for p in (path / "workdir").iterdir()) == [
        "base.txt", "blue.txt", "red.txt"]
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "worktree", "list").count("\n") == 1
    assert_fsck(path)
    # Events: the children's carry their parent's run and call, and their branch.
    started = watch.of("sub_agent_started")
    assert {d["parent_run_id"] for d in started} == {run["run_id"]}
    call_id = next(m["tool_calls"][0]["id"] for m in run["messages"] if m.get("tool_calls")
                   and m["tool_calls"][0]["function"]["name"] == "spawn_sub_agents")
    assert {d["call_id"] for d in started} == {call_id}
    done = watch.of("sub_agent_done")
    assert {d["parent_run_id"] for d in done} == {run["run_id"]}
    child_runs = {a["run_id"]: a["branch"] for a in agents}
    deltas = [d for d in watch.of("message_delta") if d["run_id"] in child_runs]
    assert deltas and all(d["branch"] == child_runs[d["run_id"]] for d in deltas)
    assert len(watch.of("merged")) == 1
    # Usage per child in its record, summed in the tool result and the parent's record.
    assert spawned["usage"]["completion_tokens"] == sum(
        d["usage"]["completion_tokens"] for d in done) > 0
    assert run["sub_agents_usage"]["completion_tokens"] == spawned["usage"]["completion_tokens"]


async def test_eight_children_run_four_at_a_time(braid: Any) -> None:
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    labels = [f"c{i}" for i in range(8)]
    run = await run_to_end(braid, USER, sid, "\n".join(
        slow_child(label, words=4) for label in labels) + "\nmerge fail")
    assert run["status"] == "COMPLETED", run
    agents = tool_result(run, "spawn_sub_agents")["agents"]
    assert [a["status"] for a in agents] == ["COMPLETED"] * 8
    assert most_at_once(watch.spans()) == 4  # BRAID_SUBAGENTS_PARALLEL
    assert sorted(p.name for p in (path / "workdir").iterdir()) == sorted(
        f"{label}.txt" for label in labels)
    parents = git(path, "log", "-1", "--merges", "--format=%P", "main").split()
    assert len(parents) == 9
    assert_fsck(path)


async def test_a_third_level_is_refused_as_a_tool_result_and_every_run_completes(
        braid: Any) -> None:
    sid, path = await new_session(braid)
    run = await run_to_end(braid, USER, sid,
                                    "spawn one: spawn two: spawn three: say too deep")
    assert run["status"] == "COMPLETED", run
    one = tool_result(run, "spawn_sub_agents")["agents"][0]
    assert one["status"] == "COMPLETED"
    child = await sessions.get_run(braid, USER, sid, one["run_id"])
    two = tool_result(child, "spawn_sub_agents")["agents"][0]
    assert two["status"] == "COMPLETED"
    assert two["final_text"].startswith("error: sub-agents may be nested at most 2 levels")
    grandchild = await sessions.get_run(braid, USER, sid, two["run_id"])
    refused = tool_result(grandchild, "spawn_sub_agents")
    assert refused.startswith("error:")
    assert grandchild["sub_agent"]["depth"] == 2
    # The grandchild branched from its parent's branch, not main.
    base = git(path, "merge-base", one["branch"], two["branch"]).strip()
    assert base not in git(path, "rev-list", "main").split()
    assert git(path, "worktree", "list").count("\n") == 1


async def test_off_removes_both_tools(make_braid: Any) -> None:
    braid = await make_braid(subagent_tools=False)
    sid, _ = await new_session(braid)
    run = await run_to_end(braid, USER, sid, "spawn a: say hi")
    result = tool_result(run, "spawn_sub_agents")
    assert result.startswith("error: unknown tool 'spawn_sub_agents'")
    assert not [b for b in git(braid.store.path(sid), "branch").split() if b.startswith("sub_")]


async def test_a_conflicting_merge_changes_nothing_then_theirs_merges(braid: Any) -> None:
    sid, path = await new_session(braid)
    await run_to_end(braid, USER, sid, "write f.txt base")
    tip = git(path, "rev-parse", "main").strip()
    run = await run_to_end(braid, USER, sid,
                                    "spawn a: write f.txt A\nspawn b: write f.txt B\n"
                                    "merge fail")
    assert run["status"] == "COMPLETED"
    assert run["messages"][-1]["content"] == "conflicts: f.txt"
    refused = tool_result(run, "merge_branches")
    assert [(c["path"], c["ours"], c["theirs"]) for c in refused["conflicts"]] == [
        ("f.txt", "A\n", "B\n")] or refused["conflicts"][0]["path"] == "f.txt"
    assert "nothing was changed" in refused["note"]
    assert (path / "workdir/f.txt").read_text() == "base\n"
    assert git(path, "log", "--merges", "--format=%H", f"{tip}..main") == ""
    # The model retries with `theirs` (the demo takes the branches of the last spawn).
    again = await run_to_end(braid, USER, sid, "merge theirs")
    assert again["status"] == "COMPLETED", again
    merged = tool_result(again, "merge_branches")
    assert merged["resolved"] == {"strategy": "theirs", "paths": ["f.txt"]}
    assert (path / "workdir/f.txt").read_text() == "B\n"
    assert len(git(path, "log", "-1", "--format=%P", merged["commit_id"]).split()) == 3
    assert git(path, "status", "--porcelain") == ""


async def test_stopping_the_parent_stops_its_children(braid: Any) -> None:
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    run_id = await send_message(braid, USER, sid, slow_child("x", 40, 100) + "\n"
                                + slow_child("y", 40, 100) + "\nmerge fail")
    await watch.until("sub_agent_started", 2)
    await watch.until("message_delta", 4)
    stopped = await cancel_run(braid, USER, sid, run_id)
    assert stopped["status"] == "CANCELLED"
    run = await sessions.get_run(braid, USER, sid, run_id)
    agents = tool_result(run, "spawn_sub_agents")["agents"]
    assert [a["status"] for a in agents] == ["CANCELLED", "CANCELLED"]
    for a in agents:
        child = await sessions.get_run(braid, USER, sid, a["run_id"])
        assert child["status"] == "CANCELLED"
    assert not braid.runs.for_session(sid)
    assert git(path, "worktree", "list").count("\n") == 1
    assert git(path, "log", "--merges", "--format=%H", "main") == ""


async def test_stopping_one_child_lets_the_parent_go_on(braid: Any) -> None:
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    run_id = await send_message(braid, USER, sid, "spawn quick: write q.txt q\n"
                                + slow_child("long", 60, 100))
    await watch.until("sub_agent_started", 2)
    long_id = next(d["run_id"] for d in watch.of("sub_agent_started") if d["label"] == "long")
    await watch.until("sub_agent_done", 1)
    stopped = await call_action(braid, USER, sid, "cancel_run", run_id=long_id)
    assert stopped == {"run_id": long_id, "status": "CANCELLED"}
    active = braid.runs.find(sid, run_id)
    if active is not None:
        await active.done.wait()
    run = await sessions.get_run(braid, USER, sid, run_id)
    assert run["status"] == "COMPLETED"
    agents = tool_result(run, "spawn_sub_agents")["agents"]
    assert [(a["label"], a["status"]) for a in agents] == [("quick", "COMPLETED"),
                                                           ("long", "CANCELLED")]
    assert run["messages"][-1]["content"] == "done: spawned quick, long"


async def test_a_merge_after_a_stopped_child_answers_with_the_others_answers(
        braid: Any) -> None:
    sid, _ = await new_session(braid)
    watch = Watch(braid, sid)
    run_id = await send_message(braid, USER, sid, "spawn quick: write q.txt q\n"
                                + slow_child("long", 60, 100) + "\nmerge theirs")
    await watch.until("sub_agent_started", 2)
    await watch.until("sub_agent_done", 1)
    long_id = next(d["run_id"] for d in watch.of("sub_agent_started") if d["label"] == "long")
    await call_action(braid, USER, sid, "cancel_run", run_id=long_id)
    active = braid.runs.find(sid, run_id)
    if active is not None:
        await active.done.wait()
    run = await sessions.get_run(braid, USER, sid, run_id)
    # The stopped child has no answer: it adds no empty "; " to the merge turn's answer.
    assert run["messages"][-1]["content"] == "merged: done: wrote q.txt"


async def test_a_stopped_childs_branch_is_not_merged(braid: Any) -> None:
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    run_id = await send_message(braid, USER, sid, "spawn quick: write q.txt q\n"
                                + "spawn long: write long.txt long\\nslow 3000\\nsay long"
                                + "\nmerge theirs")
    await watch.until("sub_agent_started", 2)
    await watch.until("sub_agent_done", 1)
    started = {d["label"]: d for d in watch.of("sub_agent_started")}
    long_id = started["long"]["run_id"]
    while not any(d.get("run_id") == long_id for d in watch.of("checkpoint")):
        await asyncio.sleep(0.02)  # its file is written: what a stop must not let merge
    await call_action(braid, USER, sid, "cancel_run", run_id=long_id)
    active = braid.runs.find(sid, run_id)
    if active is not None:
        await active.done.wait()
    run = await sessions.get_run(braid, USER, sid, run_id)
    long_branch = started["long"]["branch"]
    merged = tool_result(run, "merge_branches")
    assert merged["skipped"] == [long_branch]
    merge_oid = merged["commit_id"]
    # The stopped child's file was written on its branch, and stays there only.
    assert git(path, "show", f"{long_branch}:workdir/long.txt").strip() == "long"
    assert git(path, "show", f"{merge_oid}:workdir/q.txt").strip() == "q"
    assert "workdir/long.txt" not in git(path, "ls-tree", "-r", "--name-only", merge_oid)
    assert not (path / "workdir" / "long.txt").exists()
    parents = git(path, "log", "-1", "--format=%P", merge_oid).split()
    assert git(path, "rev-parse", long_branch).strip() not in parents


async def test_each_childs_turn_and_the_merge_revert_like_any_turn(braid: Any) -> None:
    sid, path = await new_session(braid)
    await run_to_end(braid, USER, sid, "write keep.txt keep")
    run = await run_to_end(braid, USER, sid, "spawn a: write a.txt A\n"
                                    "spawn b: write b.txt B\nmerge fail")
    assert run["status"] == "COMPLETED"
    agents = tool_result(run, "spawn_sub_agents")["agents"]
    # The merge is a checkpoint of the turn that made it: reverting the turn undoes it.
    undone = await revert.revert_turn(braid, USER, sid, run["run_id"])
    assert sorted(undone["restored_paths"]) == ["a.txt", "b.txt"]
    assert sorted(p.name for p in (path / "workdir").iterdir()) == ["keep.txt"]
    redone = await revert.unrevert_turn(braid, USER, sid, run["run_id"])
    assert sorted(redone["restored_paths"]) == ["a.txt", "b.txt"]
    # A child's turn, on its own branch.
    await sessions.checkout(braid, USER, sid, agents[0]["branch"])
    out = await revert.revert_turn(braid, USER, sid, agents[0]["run_id"])
    assert out["restored_paths"] == ["a.txt"]
    assert not (path / "workdir/a.txt").exists()
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_bad_calls_are_tool_results(braid: Any) -> None:
    sid, path = await new_session(braid)
    run = await run_to_end(braid, USER, sid, "merge fail")
    assert run["status"] == "COMPLETED"
    assert tool_result(run, "merge_branches").startswith("error: branches must be")


@pytest.mark.parametrize("raw", [{"agents": []}, {"agents": [{"label": "x"}] * 9},
                                 {"agents": [{"label": "x", "prompt": ""}]}])
def test_spawn_arguments_are_checked(raw: dict[str, Any]) -> None:
    from server.agent import orchestrate

    with pytest.raises(orchestrate.ToolRefused):
        orchestrate.check_agents(raw)


def test_through_the_socket_and_http(shared_server: Any) -> None:
    """A real server: the spawn over the socket streams the children's events (with their
    parent's run and call, and their branch); the HTTP twin runs one to its end."""
    srv = shared_server
    sid = srv.new_session()
    ws = srv.socket(sid)
    sent = ws.call("send_message", text="spawn a: write a.txt A\nspawn b: write b.txt B\n"
                   "merge fail")
    run_id = sent["data"]["run_id"]
    started = [ws.event("sub_agent_started")["data"], ws.event("sub_agent_started")["data"]]
    assert {d["parent_run_id"] for d in started} == {run_id}
    assert all(d["call_id"] and d["branch"].startswith("sub_") for d in started)
    done = ws.until(lambda f: f.get("event") == "run_completed"
                    and f["data"]["run_id"] == run_id, timeout=30)
    assert done["data"]["messages"][-1]["content"] == "merged: done: wrote a.txt; " \
        "done: wrote b.txt"
    child_done = [f["data"] for f in ws.frames if f.get("event") == "run_completed"
                  and f["data"]["run_id"] != run_id]
    assert sorted(d["branch"] for d in child_done) == sorted(d["branch"] for d in started)
    ws.close()
    run = srv.run(sid, "spawn c: write c.txt C")
    assert run["status"] == "COMPLETED"
    assert run["messages"][-1]["content"] == "done: spawned c"
    status, files = srv.api("GET", f"/api/sessions/{sid}/files?path=")
    assert status == 200
    assert sorted(e["path"] for e in files["entries"]) == ["a.txt", "b.txt"]


async def test_a_server_stopped_mid_spawn_resumes_its_children_when_the_parent_resumes(
        make_braid: Any, tmp_path: Any) -> None:
    from server.features.timetravel import continue_run_to_end

    data = tmp_path / "stopping"
    braid = await make_braid(data_dir=data)
    sid, path = await new_session(braid)
    watch = Watch(braid, sid)
    run_id = await send_message(braid, USER, sid, "spawn quick: write q.txt q\n"
                                + slow_child("long", 30, 100) + "\nmerge fail")
    await watch.until("sub_agent_done", 1)
    await watch.until("sub_agent_started", 2)
    quick = next(d for d in watch.of("sub_agent_done"))
    await braid.stop()  # a server stopped (SIGTERM), its runs stopped as on a shutdown
    again = await make_braid(data_dir=data)
    parent = await sessions.get_run(again, USER, sid, run_id)
    assert parent["status"] == "INTERRUPTED"
    assert parent["spawn"]["children"][0]["status"] == "COMPLETED"
    quick_tip = git(path, "rev-parse", quick["branch"]).strip()
    done = await continue_run_to_end(again, USER, sid, run_id)
    assert done["status"] == "COMPLETED", done
    assert done["messages"][-1]["content"].startswith("merged: done: wrote q.txt; long")
    agents = tool_result(done, "spawn_sub_agents")["agents"]
    assert [a["status"] for a in agents] == ["COMPLETED", "COMPLETED"]
    long = await sessions.get_run(again, USER, sid, agents[1]["run_id"])
    assert long["resumed_from_message_index"] >= 1  # resumed in place, not run anew
    assert git(path, "rev-parse", quick["branch"]).strip() == quick_tip  # never re-run
    assert sorted(p.name for p in (path / "workdir").iterdir()) == ["long.txt", "q.txt"]
    assert_fsck(path)
