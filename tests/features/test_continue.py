"""Continue / fork / regenerate a run (DESIGN §4) through the core `Braid` object against the
demo model, with the session repositories checked through the git CLI."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, new_session, next_event, run_turn
from server.agent import turns
from server.app.braid import Braid
from server.app.reindex import reindex
from server.base.errors import BadRequest, Busy, NotFound
from server.features import sessions, timetravel
from server.store.users import DEFAULT_USER
from server.web.errors import error_frame, status_of
from tests.model_replay import Answer, ReplayServer, error, sse, text_stream

USER = DEFAULT_USER
MakeBraid = Callable[..., Awaitable[Braid]]
TWO_BATCHES = "write a.txt 1\nwrite b.txt 2\nbatch\nwrite c.txt 3"


async def cont(braid: Braid, session_id: str, run_id: str, **params: Any) -> dict[str, Any]:
    return await timetravel.continue_run_to_end(braid, USER, session_id, run_id, **params)


def trailers(path: Path, rev: str) -> dict[str, str]:
    out = git(path, "log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def branches(path: Path) -> dict[str, str]:
    out = git(path, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    return dict(line.split() for line in out.splitlines())


def workdir_files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path / "workdir")) for p in (path / "workdir").rglob("*")
                  if p.is_file())


def record_at(path: Path, rev: str, run_id: str) -> dict[str, Any]:
    name = git(path, "ls-tree", "-r", "--name-only", rev, "runs/").split()
    match = next(n for n in name if n.endswith(f"/{run_id}.json"))
    return json.loads(git(path, "show", f"{rev}:{match}"))


def tool_calls_in(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or ()) for m in messages)


# ---------------------------------------------------------------------------------- forks


async def test_last_user_with_input_forks_a_sibling_and_leaves_the_source(braid: Braid) -> None:
    sid, path = await new_session(braid)
    first = await run_turn(braid, sid, "write x.txt one")
    later = await run_turn(braid, sid, "say later on main")
    main_before = branches(path)["main"]
    source_before = await sessions.get_run(braid, USER, sid, first["run_id"])

    fork = await cont(braid, sid, first["run_id"], continue_from="last_user", input="recall")
    new_id = fork["run_id"]
    assert new_id != first["run_id"] and fork["status"] == "COMPLETED"
    assert fork["forked_from_run_id"] == first["run_id"]
    assert fork["forked_from_message_index"] == 1 and fork["message_index"] == 1
    assert fork["branch"] == f"run/{new_id}" and fork["forked"] is True
    # The model saw only this branch: the kept user message and the new input, nothing of
    # the later run on main.
    assert fork["messages"][-1]["content"] == "write x.txt one | recall"
    roles = [m["role"] for m in fork["messages"]]
    assert roles == ["user", "user", "assistant"]
    copy = fork["messages"][0]
    assert copy["copied_from"] == first["messages"][0]["id"] and copy["run_id"] == new_id
    assert fork["messages"][2]["id"] == new_id  # the run id is its first assistant message

    # The source run, its branch and its commit are untouched.
    assert branches(path)["main"] == main_before
    assert await sessions.get_run(braid, USER, sid, first["run_id"]) == source_before
    assert record_at(path, "main", first["run_id"])["status"] == "COMPLETED"
    # The fork starts from the checkpoint at index 1 (the user message only): no x.txt yet.
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"run/{new_id}"
    assert workdir_files(path) == []
    log = git(path, "log", "--format=%s", f"main..run/{new_id}").splitlines()
    assert len(log) == 2 and log[1].startswith("Fork of run")
    fork_commit = git(path, "rev-list", "--reverse", f"main..run/{new_id}").split()[0]
    assert trailers(path, fork_commit) == {"Braid-Kind": "fork", "Braid-Run": new_id,
                                           "Braid-Message-Index": "1"}
    # The fork branch holds the history before the source run and the new run's messages only.
    tree = git(path, "ls-tree", "-r", "--name-only", f"run/{new_id}", "history/").split()
    ids = [json.loads(git(path, "show", f"run/{new_id}:{p}"))["run_id"] for p in tree]
    assert ids == [new_id] * 3
    assert not any(later["run_id"] in p for p in tree)

    info = await sessions.session_info(braid, USER, sid)
    row = next(r for r in info["runs"] if r["run_id"] == new_id)
    assert row["forked_from_run_id"] == first["run_id"]
    assert row["forked_from_message_index"] == 1 and row["branch"] == f"run/{new_id}"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_a_branch_never_sees_its_sibling_runs(braid: Braid) -> None:
    sid, _ = await new_session(braid)
    source = await run_turn(braid, sid, "first question")
    one = await cont(braid, sid, source["run_id"], continue_from=0, input="sibling one")
    two = await cont(braid, sid, source["run_id"], continue_from=0, input="sibling two")
    recall = await run_turn(braid, sid, "recall")  # on run/<two>, the branch shown now
    assert recall["branch"] == two["branch"]
    assert recall["messages"][-1]["content"] == "sibling two | recall"
    assert one["messages"][-1]["content"] == "echo: sibling one"


async def test_an_index_inside_a_tool_batch_snaps_down(braid: Braid) -> None:
    sid, path = await new_session(braid)
    source = await run_turn(braid, sid, TWO_BATCHES)
    # u, a(2 calls), t, t, a(1 call), t, a: safe indexes are 0, 1, 4, 6, 7.
    assert [m["role"] for m in source["messages"]] == \
        ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    inside = await cont(braid, sid, source["run_id"], continue_from=3, input="say early")
    assert inside["forked_from_message_index"] == 1
    assert workdir_files(path) == []
    second = await cont(braid, sid, source["run_id"], continue_from=5, input="say mid")
    assert second["forked_from_message_index"] == second["message_index"] == 4
    assert record_at(path, "HEAD", second["run_id"])["forked_from_message_index"] == 4
    assert workdir_files(path) == ["a.txt", "b.txt"]  # the files at index 4: no c.txt
    assert [m["role"] for m in second["messages"]] == \
        ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert second["messages"][-1]["content"] == "mid"
    # The branch holds the new run's messages only: the source's are taken out of its tree.
    tree = git(path, "ls-tree", "-r", "--name-only", "HEAD", "history/", "runs/").split()
    owners = {json.loads(git(path, "show", f"HEAD:{p}"))["run_id"] for p in tree}
    assert owners == {second["run_id"]}
    assert len(tree) == 7  # six messages and one record
    assert_fsck(path)


async def test_bad_parameters_are_refused_and_create_nothing(braid: Braid) -> None:
    sid, path = await new_session(braid)
    source = await run_turn(braid, sid, "write a.txt 1")
    before = (branches(path), git(path, "status", "--porcelain"),
              (await sessions.session_info(braid, USER, sid))["runs"])
    rid = source["run_id"]
    bad: list[dict[str, Any]] = [
        {"continue_from": -1, "input": "x"}, {"continue_from": 5, "input": "x"},
        {"continue_from": "3"}, {"continue_from": True}, {"continue_from": 1.5},
        {"continue_from": "start"}, {"input": ""}, {"input": 7}, {"fork": "yes"},
        {"regenerate": 1}, {"replace_original": "no"}, {"regenerate": True, "input": "x"},
        {"continue_from": 0},  # keeps no user message and gives no input
    ]
    # As clients send them: parsed by the action's declaration, then the core call.
    for params in bad:
        with pytest.raises(BadRequest):
            await call_action(braid, USER, sid, "continue_run", run_id=rid, **params)
    with pytest.raises(BadRequest) as caught:
        await timetravel.continue_run(braid, USER, sid, rid, continue_from=5, input="x")
    assert caught.value.details == {"message_count": 4}
    for unknown in ("f" * 32, "nope"):
        with pytest.raises(NotFound):
            await call_action(braid, USER, sid, "continue_run", run_id=unknown, input="x")
    for missing in (None, 3):
        with pytest.raises(BadRequest):
            await call_action(braid, USER, sid, "continue_run", run_id=missing, input="x")
    with pytest.raises(NotFound):
        await timetravel.continue_run(braid, "someone-else", sid, rid, input="x")
    with pytest.raises(NotFound):
        await timetravel.list_checkpoints(braid, "someone-else", sid, rid)
    after = (branches(path), git(path, "status", "--porcelain"),
             (await sessions.session_info(braid, USER, sid))["runs"])
    assert after == before
    assert_fsck(path)


async def test_a_fork_from_before_a_turn_has_not_its_files(braid: Braid) -> None:
    sid, path = await new_session(braid)
    await run_turn(braid, sid, "write keep.txt kept")
    writer = await run_turn(braid, sid, "write x.txt hello")
    fork = await cont(braid, sid, writer["run_id"], continue_from=0, input="say instead")
    assert workdir_files(path) == ["keep.txt"]
    assert fork["messages"][-1]["content"] == "instead"
    # Switching back to the source branch brings x.txt back, and forth again takes it away.
    await sessions.checkout(braid, USER, sid, "main")
    assert (path / "workdir/x.txt").read_text() == "hello\n"
    await sessions.checkout(braid, USER, sid, fork["branch"])
    assert workdir_files(path) == ["keep.txt"]
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


async def test_a_fork_of_a_fork_takes_the_prefix_files_from_its_source(braid: Braid) -> None:
    sid, path = await new_session(braid)
    source = await run_turn(braid, sid, TWO_BATCHES)
    onward = await cont(braid, sid, source["run_id"], input="write d.txt 4")
    assert onward["forked_from_message_index"] == 7
    assert workdir_files(path) == ["a.txt", "b.txt", "c.txt", "d.txt"]
    # Index 4 of the fork is a copy of the source's index 4: its files are the source's then.
    again = await cont(braid, sid, onward["run_id"], continue_from=4, input="say back")
    assert workdir_files(path) == ["a.txt", "b.txt"]
    assert again["forked_from_run_id"] == onward["run_id"]
    assert [m["copied_from"] for m in again["messages"][:4]] == \
        [m["id"] for m in onward["messages"][:4]]
    timeline = await timetravel.list_checkpoints(braid, USER, sid, onward["run_id"])
    by_index = {c["message_index"]: c for c in timeline["checkpoints"]}
    source_line = await timetravel.list_checkpoints(braid, USER, sid, source["run_id"])
    source_by_index = {c["message_index"]: c for c in source_line["checkpoints"]}
    assert by_index[4]["commit_id"] == source_by_index[4]["commit_id"]
    assert by_index[7]["kind"] == "fork" and by_index[7]["exact"]
    assert_fsck(path)


@pytest.mark.slow
async def test_completed_and_cancelled_runs_fork_errors_resume_in_place(braid: Braid) -> None:
    sid, path = await new_session(braid)
    failed = await run_turn(braid, sid, "fail boom")
    assert failed["status"] == "ERROR"
    resumed = await cont(braid, sid, failed["run_id"], input="say recovered")
    assert resumed["run_id"] == failed["run_id"] and resumed["forked"] is False
    assert resumed["status"] == "COMPLETED" and resumed["branch"] == "main"
    assert resumed["forked_from_run_id"] is None
    assert [m["content"] for m in resumed["messages"]] == ["fail boom", "say recovered",
                                                          "recovered"]
    assert resumed["messages"][2]["id"] == failed["run_id"]
    assert list(branches(path)) == ["main"]
    assert record_at(path, "main", failed["run_id"])["resumed_from_message_index"] == 1

    # Cancelled: a sibling, the cancelled run stays as it was.
    queue = braid.bus.subscribe(sid)
    run_id = await turns.send_message(braid, USER, sid, "slow 100\nsay a b c d e f g h")
    await next_event(queue, "message_delta")
    await turns.cancel_run(braid, USER, sid, run_id)
    main_tip = branches(path)["main"]
    forked = await cont(braid, sid, run_id, input="say again")
    assert forked["forked"] is True and forked["forked_from_run_id"] == run_id
    assert branches(path)["main"] == main_tip
    assert record_at(path, "main", run_id)["status"] == "CANCELLED"
    # A completed run forks even from its end; fork=True forks an errored run too.
    done = await run_turn(braid, sid, "say fine")
    assert (await cont(braid, sid, done["run_id"], input="say more"))["forked"] is True
    again = await run_turn(braid, sid, "fail twice")
    sibling = await cont(braid, sid, again["run_id"], fork=True, input="say forked")
    assert sibling["forked"] is True and sibling["run_id"] != again["run_id"]
    assert_fsck(path)


async def test_resuming_a_failed_run_turns_came_after_goes_on_at_the_branch_end(
        braid: Braid) -> None:
    """A run's messages are numbered contiguously on its branch, so a failed run with turns
    after it cannot grow in place: Resume makes a new run at the branch's end that goes on
    with it, on the same branch, and the later turn and its file stay."""
    sid, path = await new_session(braid)
    failed = await run_turn(braid, sid, "fail boom")
    later = await run_turn(braid, sid, "write later.txt made later")
    tip = branches(path)["main"]
    resumed = await cont(braid, sid, failed["run_id"], input="say recovered")
    assert resumed["forked"] is False and resumed["branch"] == "main"
    assert resumed["run_id"] not in (failed["run_id"], later["run_id"])
    assert resumed["status"] == "COMPLETED" and resumed["forked_from_run_id"] is None
    assert [m["content"] for m in resumed["messages"]] == ["fail boom", "say recovered",
                                                          "recovered"]
    assert resumed["messages"][0]["copied_from"] == failed["messages"][0]["id"]
    assert list(branches(path)) == ["main"]
    assert git(path, "merge-base", "--is-ancestor", tip, "main") == ""  # on top of the later
    record = record_at(path, "main", resumed["run_id"])
    assert record["resumes_run_id"] == failed["run_id"]
    assert record_at(path, "main", failed["run_id"])["status"] == "ERROR"  # left as it was
    assert record_at(path, "main", later["run_id"])["status"] == "COMPLETED"
    assert (path / "workdir" / "later.txt").read_text() == "made later\n"
    order = [t["run_id"] for t in (await sessions.transcript(braid, USER, sid))["turns"]]
    assert order == [failed["run_id"], later["run_id"], resumed["run_id"]]
    assert_fsck(path)


async def test_a_run_resumed_at_the_end_is_not_resumed_twice(braid: Braid) -> None:
    """A Resume is spent once a run at the branch's end goes on with the run: its record
    names that run (committed with it, checked with git), and a second Resume is refused
    with `already_resumed` (409), live or committed, changing nothing; a fork still may."""
    sid, path = await new_session(braid)
    failed = await run_turn(braid, sid, "fail boom")
    await run_turn(braid, sid, "say later")
    queue = braid.bus.subscribe(sid)
    started = await timetravel.continue_run(braid, USER, sid, failed["run_id"],
                                            input="slow 150\nsay a b c d e f")
    await next_event(queue, "message_delta")
    # Going on, not yet committed: refused all the same.
    with pytest.raises(timetravel.AlreadyResumed) as live:
        await timetravel.continue_run(braid, USER, sid, failed["run_id"])
    assert live.value.details == {"resumed_by_run_id": started["run_id"],
                                  "turn_id": failed["run_id"]}
    await next_event(queue, "run_completed")
    assert record_at(path, "main", failed["run_id"])["resumed_by_run_id"] == started["run_id"]
    assert record_at(path, "main", failed["run_id"])["status"] == "ERROR"
    tip, log = branches(path), git(path, "log", "--format=%H", "main")
    turns_before = (await sessions.transcript(braid, USER, sid))["turns"]
    with pytest.raises(timetravel.AlreadyResumed) as done:
        await cont(braid, sid, failed["run_id"], input="say once more")
    error = done.value
    assert error.code == "already_resumed" and status_of(error) == 409
    assert started["run_id"] in error.message
    assert error_frame("continue_run", 7, error)["error"]["code"] == "already_resumed"
    # Through the action as the socket parses it, too.
    with pytest.raises(timetravel.AlreadyResumed):
        await call_action(braid, USER, sid, "continue_run", run_id=failed["run_id"])
    assert branches(path) == tip and git(path, "log", "--format=%H", "main") == log
    assert (await sessions.transcript(braid, USER, sid))["turns"] == turns_before
    assert braid.runs.for_session(sid) == []
    # A fork of it is another thing: still allowed.
    fork = await cont(braid, sid, failed["run_id"], fork=True, input="say forked")
    assert fork["forked"] is True and fork["status"] == "COMPLETED"
    assert_fsck(path)


@pytest.mark.slow
async def test_an_interrupted_run_resumes_in_place(make_braid: MakeBraid, tmp_path: Path
                                                   ) -> None:
    braid = await make_braid(data_dir=tmp_path / "d")
    sid, path = await new_session(braid)
    queue = braid.bus.subscribe(sid)
    run_id = await turns.send_message(braid, USER, sid, "slow 100\nsay a b c d e f g h")
    await next_event(queue, "message_delta")
    await braid.stop()
    again = await make_braid(data_dir=tmp_path / "d")
    resumed = await cont(again, sid, run_id)
    assert resumed["run_id"] == run_id and resumed["status"] == "COMPLETED"
    assert resumed["messages"][-1]["content"] == "a b c d e f g h"
    assert resumed["messages"][-2].get("partial") is True
    assert record_at(path, "main", run_id)["status"] == "COMPLETED"
    assert list(branches(path)) == ["main"]
    assert_fsck(path)


async def test_regenerate_keeps_tool_results_and_runs_no_tool(braid: Braid) -> None:
    sid, path = await new_session(braid)
    source = await run_turn(braid, sid, "append log.txt x\nsay logged it")
    assert (path / "workdir/log.txt").read_text() == "x\n"
    main_tip = branches(path)["main"]
    regen = await cont(braid, sid, source["run_id"], regenerate=True)
    assert regen["forked"] is True and regen["regenerated_from"] == source["run_id"]
    assert regen["forked_from_message_index"] == 3  # the final answer alone was dropped
    assert [m["role"] for m in regen["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert regen["messages"][-1]["content"] == "logged it"
    # No tool ran again: one call and one result, both copies; the file was appended once.
    assert tool_calls_in(regen["messages"]) == 1
    assert all(m.get("copied_from") for m in regen["messages"][:3])
    assert (path / "workdir/log.txt").read_text() == "x\n"
    # The source is marked REGENERATED by one record-only commit on its branch.
    assert record_at(path, "main", source["run_id"])["status"] == "REGENERATED"
    changed = git(path, "diff", "--name-only", main_tip, "main").split()
    assert changed == [f"runs/000/00/{source['run_id']}.json"]
    assert trailers(path, "main")["Braid-Kind"] == "fork"
    info = await sessions.session_info(braid, USER, sid)
    status = {r["run_id"]: r["status"] for r in info["runs"]}
    assert status[source["run_id"]] == "REGENERATED"

    # Without replace_original the source keeps its status.
    other = await run_turn(braid, sid, "say keep me")
    kept = await cont(braid, sid, other["run_id"], regenerate=True, replace_original=False)
    assert kept["forked_from_message_index"] == 1
    assert kept["regenerated_from"] == other["run_id"]
    assert record_at(path, other["branch"], other["run_id"])["status"] == "COMPLETED"
    assert_fsck(path)

    # Git is the truth: a rebuilt index says the same.
    rows = (await sessions.session_info(braid, USER, sid))["runs"]
    await reindex(braid)
    assert (await sessions.session_info(braid, USER, sid))["runs"] == rows


async def test_checkpoint_timeline(braid: Braid) -> None:
    sid, path = await new_session(braid)
    source = await run_turn(braid, sid, TWO_BATCHES)
    timeline = (await timetravel.list_checkpoints(braid, USER, sid, source["run_id"]))
    points = timeline["checkpoints"]
    assert [p["message_index"] for p in points] == [0, 1, 4, 6, 7]
    commits = git(path, "log", "--reverse", "--format=%H").split()
    before, batch1, batch2, turn = commits[-4:]
    assert [p["commit_id"] for p in points] == [before, before, batch1, batch2, turn]
    assert [p["kind"] for p in points] == ["user-edit", "user-edit", "tool-batch",
                                           "tool-batch", "turn"]
    assert [p["exact"] for p in points] == [False, False, True, True, True]
    assert points[1]["preview"] == "user: write a.txt 1 write b.txt 2 batch write c.txt 3"
    assert points[2]["preview"].startswith("tool: ")
    assert points[4]["preview"] == "assistant: done: wrote a.txt, wrote b.txt, wrote c.txt"
    assert all(p["created_at"].endswith("Z") for p in points)


async def test_continuing_while_a_run_goes_on_is_busy(braid: Braid) -> None:
    sid, path = await new_session(braid)
    done = await run_turn(braid, sid, "say one")
    queue = braid.bus.subscribe(sid)
    live = await turns.send_message(braid, USER, sid, "slow 80\nsay a b c d e f")
    with pytest.raises(Busy):
        await timetravel.continue_run(braid, USER, sid, done["run_id"], input="x")
    with pytest.raises(Busy):
        await timetravel.continue_run(braid, USER, sid, live, fork=True, input="x")
    await next_event(queue, "run_completed")
    # Nothing was made: no branch, no run besides the two.
    assert list(branches(path)) == ["main"]
    runs = (await sessions.session_info(braid, USER, sid))["runs"]
    assert [r["run_id"] for r in runs] == [done["run_id"], live]
    # Once the run is over, the same call goes through.
    assert (await cont(braid, sid, done["run_id"], input="say now"))["forked"] is True


# ------------------------------------------------------------- what a resume sends the model


def _sent(request: dict[str, Any]) -> list[tuple[str, str]]:
    """A request's conversation as (role, content), its system messages left out."""
    return [(m["role"], m.get("content") or "") for m in request["messages"]
            if m["role"] != "system"]


def _write_call(path: str, content: str) -> Answer:
    """A stream of one write_file call, as a server sends it."""
    args = json.dumps({"path": path, "content": content})
    return Answer(body=sse([
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "write_file", "arguments": args}}]},
            "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]))


async def test_a_resumed_run_sends_the_conversation_once(make_braid: MakeBraid,
                                                         replay: ReplayServer) -> None:
    """Resumed in place or as a new run at the branch's end, a failed run's conversation
    goes to the model once: its user message, then the tool call and result it left, last
    (the later turn before it, its answer kept). The recorded requests are what Braid sent,
    whatever a model would answer."""
    braid = await make_braid(model="smollm2", openai_base_url=replay.base_url,
                             model_retries=0)
    sid, path = await new_session(braid)
    replay.push(_write_call("a.txt", "1"), error(500, "down for a moment"))
    failed = await run_turn(braid, sid, "first question")
    assert failed["status"] == "ERROR" and (path / "workdir" / "a.txt").read_text() == "1"
    mine = [("user", "first question"), ("assistant", ""), ("tool", "created a.txt (1 bytes)")]
    # In place: it is the branch's last turn.
    replay.push(error(500, "down again"))
    again = await cont(braid, sid, failed["run_id"])
    assert again["run_id"] == failed["run_id"] and again["status"] == "ERROR"
    assert _sent(replay.requests[-1]) == mine
    # At the end: a later turn came after it.
    replay.push(text_stream("second answer"))
    later = await run_turn(braid, sid, "second question")
    assert later["status"] == "COMPLETED"
    replay.push(text_stream("first answer"))
    resumed = await cont(braid, sid, failed["run_id"])
    assert resumed["run_id"] != failed["run_id"] and resumed["status"] == "COMPLETED"
    theirs = [("user", "second question"), ("assistant", "second answer")]
    assert _sent(replay.requests[-1]) == theirs + mine
    sent = replay.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == sent[-1]["tool_call_id"] == "call_1"
    # The next turn on the branch sends each message once too.
    replay.push(text_stream("third answer"))
    await run_turn(braid, sid, "third question")
    assert _sent(replay.requests[-1]) == theirs + mine + [("assistant", "first answer"),
                                                          ("user", "third question")]
