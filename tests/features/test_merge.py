"""Merging sub-agent branches back: a real multi-parent commit, three-way merges of `workdir/`,
every conflict strategy, and a merge turn that is a normal run. Real `Braid`, real demo model
through the openai client, repositories checked with the git CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import assert_fsck, call_action, git, run_to_end
from server.app.braid import Braid
from server.base.errors import BadRequest, Busy, Conflict, Forbidden, NotFound
from server.features import dag, merge, revert, sessions, subagents, timetravel

USER = "local"


class Session:
    def __init__(self, braid: Braid, session_id: str, turn_id: str) -> None:
        self.braid, self.id, self.turn_id = braid, session_id, turn_id
        self.path = braid.store.path(session_id)

    @classmethod
    async def start(cls, braid: Braid, text: str = "write base.txt base") -> Session:
        sid = (await sessions.create_session(braid, USER))["session_id"]
        run = await run_to_end(braid, USER, sid, text)
        return cls(braid, sid, run["run_id"])

    async def spawn(self, prompt: str, label: str | None = None) -> dict[str, Any]:
        result = await subagents.spawn_sub_agent(self.braid, USER, self.id, self.turn_id,
                                                 prompt, label)
        assert result["status"] == "COMPLETED"
        return result

    async def merge(self, branches: list[str], message: str = "merge them",
                    strategy: str | None = None,
                    resolutions: dict[str, str] | None = None) -> dict[str, Any]:
        return await call_action(self.braid, USER, self.id, "merge_branches",
                                 branches=branches, message=message, strategy=strategy,
                                 resolutions=resolutions)

    def files(self) -> dict[str, str]:
        work = self.path / "workdir"
        return {p.relative_to(work).as_posix(): p.read_text()
                for p in sorted(work.rglob("*")) if p.is_file()}

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD").strip()

    def trailers(self, rev: str) -> dict[str, str]:
        out = git(self.path, "log", "-1", "--format=%(trailers:only,unfold)", rev)
        return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


async def red_and_blue(s: Session, same_file: bool = False) -> list[str]:
    red = await s.spawn(f"write {'same' if same_file else 'red'}.txt red\nsay red", "red")
    blue = await s.spawn(f"write {'same' if same_file else 'blue'}.txt blue\nsay blue", "blue")
    return [red["branch"], blue["branch"]]


async def test_merging_two_branches_makes_one_commit_with_three_parents(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s)
    before = s.head()
    tips = [git(s.path, "rev-parse", b).strip() for b in branches]
    result = await s.merge(branches, "bring them home")
    assert result["final_text"] == "merged: red; blue"
    assert result["conflicts"] == [] and result["status"] == "COMPLETED"
    assert result["parent_ids"] == [before, *tips]
    assert s.files() == {"base.txt": "base\n", "red.txt": "red\n", "blue.txt": "blue\n"}

    raw = git(s.path, "cat-file", "-p", result["commit_id"])
    assert [line.split()[1] for line in raw.splitlines() if line.startswith("parent ")] == [
        before, *tips]
    assert s.trailers(result["commit_id"]) == {
        "Braid-Kind": "merge", "Braid-Run": result["run_id"], "Braid-Message-Index": "2"}
    # The merge turn is a normal run: record, messages, a final `turn` commit after the merge.
    assert git(s.path, "rev-parse", "HEAD^").strip() == result["commit_id"]
    assert s.trailers("HEAD")["Braid-Kind"] == "turn"
    assert s.trailers("HEAD")["Braid-Run"] == result["run_id"]
    run = await sessions.get_run(braid, USER, s.id, result["run_id"])
    assert run["status"] == "COMPLETED" and run["merge"]["branches"] == branches
    assert [m["role"] for m in run["messages"]] == ["system", "user", "assistant"]
    note = run["messages"][0]["content"].splitlines()
    assert note[0].startswith("Merge turn")
    assert note[1:3] == [f"- {branches[0]}: red", f"- {branches[1]}: blue"]
    assert run["messages"][1]["content"] == "bring them home"
    # A merge brings only workdir/: the parent's history is its own, no child message in it.
    history = git(s.path, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    contents = [json.loads(git(s.path, "show", f"HEAD:{f}"))["content"] for f in history]
    assert "say red" not in contents
    assert git(s.path, "status", "--porcelain") == ""
    assert_fsck(s.path)

    graph = await dag.get_dag(braid, USER, s.id)
    node = next(n for n in graph["nodes"] if n["id"] == result["commit_id"])
    assert node["kind"] == "merge" and node["parent_ids"] == [before, *tips]
    assert node["branch"] == "main"
    assert {b["name"]: b.get("result") for b in graph["branches"]} == {
        "main": None, branches[0]: "red", branches[1]: "blue"}

    # The demo model's merge answer belongs to the merge turn only.
    later = await run_to_end(braid, USER, s.id, "hello")
    assert later["messages"][-1]["content"] == "echo: hello"


async def test_a_conflict_refuses_the_merge_and_changes_nothing(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s, same_file=True)
    head, files = s.head(), s.files()
    with pytest.raises(Conflict) as err:
        await s.merge(branches)
    conflicts = err.value.details["conflicts"]
    assert [(c["path"], c["ours"], c["theirs"], c["branch"]) for c in conflicts] == [
        ("same.txt", "red\n", "blue\n", branches[1])]
    assert s.head() == head and s.files() == files
    assert git(s.path, "status", "--porcelain") == ""
    assert braid.runs.for_session(s.id) == [] and await braid.locks.held(s.id) == set()
    # And the branch is free again for the next try.
    assert (await s.merge(branches, strategy="ours"))["status"] == "COMPLETED"


async def test_a_merge_without_a_message_names_the_branches_in_words(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s)
    result = await s.merge(branches, message="")
    run = await sessions.get_run(braid, USER, s.id, result["run_id"])
    assert run["messages"][1]["content"] == "Merge sub-agent red, sub-agent blue"
    assert run["messages"][0]["content"].splitlines()[0] == (
        "Merge turn: 2 branches merged into main (on conflict: fail). What each brought:")


async def test_a_file_resolved_by_hand_settles_its_conflict(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s, same_file=True)
    with pytest.raises(Conflict) as err:
        await s.merge(branches)
    [conflict] = err.value.details["conflicts"]
    # What the editor starts from: the file with git's markers, named by branch.
    assert conflict["editable"] and not conflict["resolved"]
    assert conflict["merged"].splitlines() == [  # labelled in words for a person
        "<<<<<<< main + sub-agent red", "red", "=======", "blue", ">>>>>>> sub-agent blue"]
    assert conflict["before"] == [branches[0]] and conflict["into"] == "main"
    # One multi-parent merge commit as ever, with the user's text for the file.
    result = await s.merge(branches, resolutions={"same.txt": "purple\n"})
    assert result["status"] == "COMPLETED" and len(result["parent_ids"]) == 3
    assert s.files()["same.txt"] == "purple\n"
    assert git(s.path, "show", f"{result['commit_id']}:workdir/same.txt") == "purple\n"
    run = await sessions.get_run(braid, USER, s.id, result["run_id"])
    assert run["merge"]["resolved"] == ["same.txt"]
    assert "The user resolved these files by hand: same.txt." in run["messages"][0]["content"]
    assert git(s.path, "status", "--porcelain") == ""
    assert_fsck(s.path)


async def test_a_resolution_beats_the_strategy_and_the_rest_follow_it(braid: Braid) -> None:
    s = await Session.start(braid)
    one = await s.spawn("write a.txt one\nwrite b.txt one", "one")
    two = await s.spawn("write a.txt two\nwrite b.txt two", "two")
    branches = [one["branch"], two["branch"]]
    # a.txt by hand; b.txt still in conflict: `fail` refuses, keeping the text given.
    with pytest.raises(Conflict) as err:
        await s.merge(branches, resolutions={"a.txt": "both\n"})
    by_path = {c["path"]: c for c in err.value.details["conflicts"]}
    assert by_path["a.txt"]["resolved"] and by_path["a.txt"]["resolution"] == "both\n"
    assert not by_path["b.txt"]["resolved"]
    result = await s.merge(branches, strategy="theirs", resolutions={"a.txt": "both\n"})
    assert result["status"] == "COMPLETED"
    assert s.files()["a.txt"] == "both\n" and s.files()["b.txt"] == "two\n"


async def test_ours_is_the_branch_merged_into_and_theirs_the_incoming(braid: Braid) -> None:
    s = await Session.start(braid, "write same.txt base")
    child = await s.spawn("write same.txt child\nsay done", "child")
    await run_to_end(braid, USER, s.id, "write same.txt parent")
    with pytest.raises(Conflict) as err:
        await s.merge([child["branch"]])
    [conflict] = err.value.details["conflicts"]
    assert (conflict["into"], conflict["ours"]) == ("main", "parent\n")
    assert (conflict["branch"], conflict["theirs"]) == (child["branch"], "child\n")
    assert (await s.merge([child["branch"]], strategy="ours"))["status"] == "COMPLETED"
    assert s.files()["same.txt"] == "parent\n"


async def test_bad_resolutions_are_refused_and_change_nothing(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s, same_file=True)
    head, files = s.head(), s.files()
    with pytest.raises(BadRequest, match="other.txt has no conflict"):
        await s.merge(branches, resolutions={"same.txt": "x\n", "other.txt": "y\n"})
    for bad in ({"../same.txt": "x"}, {"same.txt": 3}, ["same.txt"], {"/etc/x": "x"}):
        with pytest.raises((BadRequest, Forbidden)):  # a path out of the workdir: forbidden
            await s.merge(branches, resolutions=bad)
    assert s.head() == head and s.files() == files
    assert git(s.path, "status", "--porcelain") == ""


@pytest.mark.parametrize(("strategy", "expected"), [("ours", "red\n"), ("theirs", "blue\n")])
async def test_ours_and_theirs_take_one_side_of_a_conflict(braid: Braid, strategy: str,
                                                           expected: str) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s, same_file=True)
    result = await s.merge(branches, strategy=strategy)
    assert s.files()["same.txt"] == expected
    assert [c["path"] for c in result["conflicts"]] == ["same.txt"]
    assert result["final_text"] == "merged: red; blue"
    assert len(result["parent_ids"]) == 3
    assert git(s.path, "status", "--porcelain") == ""
    assert_fsck(s.path)


async def test_the_agent_resolves_conflict_markers_with_its_tools(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s, same_file=True)
    result = await s.merge(branches, strategy="agent")
    assert result["final_text"] == "merged: red; blue"
    marked = git(s.path, "show", f"{result['commit_id']}:workdir/same.txt")
    assert marked.startswith("<<<<<<< main\nred\n=======\nblue\n>>>>>>> sub_")
    content = s.files()["same.txt"]
    assert content == "red\nblue\n"
    assert not any(m in content for m in ("<<<<<<<", "=======", ">>>>>>>"))
    run = await sessions.get_run(braid, USER, s.id, result["run_id"])
    calls = [c["function"]["name"] for m in run["messages"] for c in m.get("tool_calls") or ()]
    assert calls == ["read_file", "write_file"]
    kinds = git(s.path, "log", "--first-parent", "--format=%(trailers:key=Braid-Kind,valueonly)",
                f"{result['commit_id']}^..HEAD").split()
    assert kinds == ["turn", "tool-batch", "tool-batch", "merge"]  # reads, then writes
    assert git(s.path, "status", "--porcelain") == ""
    assert_fsck(s.path)


async def test_edits_to_different_parts_of_one_file_merge_cleanly(braid: Braid) -> None:
    lines = "\\n".join(f"line {i}" for i in range(1, 9))
    s = await Session.start(braid, f"write story.txt {lines}")
    top = await s.spawn("write story.txt TOP\\n" + "\\n".join(
        f"line {i}" for i in range(2, 9)) + "\nsay top")
    bottom = await s.spawn("write story.txt " + "\\n".join(
        f"line {i}" for i in range(1, 8)) + "\\nBOTTOM\nsay bottom")
    result = await s.merge([top["branch"], bottom["branch"]])
    assert result["conflicts"] == []
    assert s.files()["story.txt"].splitlines() == ["TOP", *[f"line {i}" for i in range(2, 8)],
                                                   "BOTTOM"]


async def test_a_branch_that_deletes_and_adds_files_merges_both(braid: Braid) -> None:
    s = await Session.start(braid, "write keep.txt k\nwrite base.txt base\nwrite dir/x.txt x")
    gone = await s.spawn("delete base.txt\ndelete dir/x.txt\nsay gone")
    added = await s.spawn("write dir/y.txt y\nsay added")
    await s.merge([gone["branch"], added["branch"]])
    assert s.files() == {"keep.txt": "k\n", "dir/y.txt": "y\n"}
    assert git(s.path, "ls-tree", "-r", "--name-only", "HEAD", "workdir/").split() == [
        "workdir/dir/y.txt", "workdir/keep.txt"]
    assert git(s.path, "status", "--porcelain") == ""


async def test_user_edits_are_kept_as_ours(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s)
    (s.path / "workdir" / "mine.txt").write_text("by hand\n")
    result = await s.merge(branches)
    assert s.files()["mine.txt"] == "by hand\n"
    first_parent = result["parent_ids"][0]
    assert s.trailers(first_parent)["Braid-Kind"] == "user-edit"
    assert git(s.path, "show", f"{result['commit_id']}:workdir/mine.txt") == "by hand\n"


async def test_bad_merges_are_refused(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s)
    head = s.head()
    for bad in ([], "", [1], [branches[0], branches[0]], {"a": 1}):
        with pytest.raises(BadRequest):
            await s.merge(bad)  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        await s.merge(branches, strategy="both")
    with pytest.raises(BadRequest):
        await s.merge(branches, message=5)  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        await s.merge(["main"])
    with pytest.raises(NotFound):
        await s.merge([branches[0], "no-such-branch"])
    with pytest.raises(NotFound):
        await merge.merge_branches(braid, "intruder", s.id, branches, "x")
    assert s.head() == head
    await s.merge(branches)
    with pytest.raises(BadRequest, match="already merged"):
        await s.merge(branches[:1])
    # A branch with a live run cannot be merged.
    async with braid.locks.hold(s.id, "busy-branch"):
        git(s.path, "branch", "busy-branch", "HEAD~3")
        with pytest.raises(Busy):
            await s.merge(["busy-branch"])
    assert braid.runs.for_session(s.id) == [] and await braid.locks.held(s.id) == set()


async def test_the_merge_turn_reverts_and_continues_like_any_turn(braid: Braid) -> None:
    s = await Session.start(braid)
    branches = await red_and_blue(s)
    result = await s.merge(branches)
    assert set(s.files()) == {"base.txt", "red.txt", "blue.txt"}
    undone = await revert.revert_turn(braid, USER, s.id, result["run_id"])
    assert sorted(undone["restored_paths"]) == ["blue.txt", "red.txt"]
    assert s.files() == {"base.txt": "base\n"}
    await revert.unrevert_turn(braid, USER, s.id, result["run_id"])
    assert set(s.files()) == {"base.txt", "red.txt", "blue.txt"}
    # Continuing the merge run from its merge checkpoint forks a sibling with the files.
    sibling = await timetravel.continue_run_to_end(
        braid, USER, s.id, result["run_id"], continue_from=2, input="say again", fork=True)
    assert sibling["status"] == "COMPLETED"
    assert sibling["messages"][-1]["content"] == "again"
    assert set(s.files()) == {"base.txt", "red.txt", "blue.txt"}
    # Continuing the first turn (before the merge) forks from before it: no merged files.
    before = await timetravel.continue_run_to_end(
        braid, USER, s.id, s.turn_id, continue_from="end", input="say before", fork=True)
    assert before["messages"][-1]["content"] == "before"
    assert s.files() == {"base.txt": "base\n"}
    assert_fsck(s.path)


# -- the demo model's side of a merge turn (DESIGN §6), through the real openai client ------


async def ask(messages: list[dict[str, Any]]) -> Any:
    from server.model.demo import demo_client

    client = demo_client()
    try:
        reply = await client.chat.completions.create(model="demo", messages=messages)
    finally:
        await client.close()
    return reply.choices[0].message


async def test_demo_model_resolves_listed_conflicts_then_answers_merged() -> None:
    base = {"role": "system", "content": "base prompt"}
    note = {"role": "system", "content": "Merge turn: 2 branches\n- sub_a: red\n- sub_b: blue\n"
                                         "Conflicts:\n- same.txt\n- dir/other.txt\nResolve them."}
    messages: list[dict[str, Any]] = [base, note, {"role": "user", "content": "merge"}]
    reads = await ask(messages)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in reads.tool_calls] == [
        ("read_file", {"path": "same.txt"}), ("read_file", {"path": "dir/other.txt"})]
    marked = "top\n<<<<<<< main\nred\n||||||| base\nold\n=======\nblue\n>>>>>>> sub_b\nend\n"
    messages.append({"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump() for c in reads.tool_calls]})
    messages += [{"role": "tool", "tool_call_id": reads.tool_calls[0].id, "content": marked},
                 {"role": "tool", "tool_call_id": reads.tool_calls[1].id,
                  "content": "error: dir/other.txt does not exist"}]
    writes = await ask(messages)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in writes.tool_calls] == [
        ("write_file", {"path": "same.txt", "content": "top\nred\nblue\nend\n"})]
    messages.append({"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump() for c in writes.tool_calls]})
    messages.append({"role": "tool", "tool_call_id": writes.tool_calls[0].id, "content": "ok"})
    assert (await ask(messages)).content == "merged: red; blue"
    # A later turn is not a merge turn any more: its own instructions decide.
    later = [*messages, {"role": "assistant", "content": "merged: red; blue"},
             {"role": "user", "content": "hi"}]
    assert (await ask(later)).content == "echo: hi"


async def file_and_folder(braid: Braid) -> tuple[Session, list[str]]:
    """One child makes a file `p`, the other a folder `p/` holding `q`."""
    s = await Session.start(braid)
    made_file = await s.spawn("write p file p\nsay file", "file")
    made_folder = await s.spawn("write p/q in the folder\nsay folder", "folder")
    return s, [made_file["branch"], made_folder["branch"]]


@pytest.mark.parametrize("how", ["ours", "theirs", "agent", "by hand"])
async def test_a_file_and_a_folder_of_one_name_are_both_kept_and_reported(
        braid: Braid, how: str) -> None:
    """Before, the incoming `p/q` vanished under `ours`, `agent` and a hand resolution (the
    file `p` written over the folder), and the conflict said the other side deleted `p`."""
    s, branches = await file_and_folder(braid)
    folder_branch = branches[1]
    if how == "by hand":
        result = await s.merge(branches, resolutions={"p": "mine\n"})
    else:
        result = await s.merge(branches, strategy=how)
    (conflict,) = result["conflicts"]
    assert conflict["path"] == "p" and conflict["theirs"] == "(a folder: p/q)"
    assert conflict["ours"] == "file p\n" and conflict["editable"] is False
    files = s.files()
    kept = {"ours": {"p": "file p\n", f"p~{folder_branch}/q": "in the folder\n"},
            "by hand": {"p": "mine\n", f"p~{folder_branch}/q": "in the folder\n"},
            "theirs": {"p/q": "in the folder\n", "p~main": "file p\n"},
            "agent": {"p/q": "in the folder\n", "p~main": "file p\n"}}[how]
    assert {k: v for k, v in files.items() if k.startswith("p")} == kept
    tree = git(s.path, "ls-tree", "-r", "--name-only", result["commit_id"], "workdir/").split()
    assert sorted(p for p in tree if p.startswith("workdir/p")) == sorted(
        f"workdir/{p}" for p in kept)
    assert git(s.path, "status", "--porcelain") == ""
    assert_fsck(s.path)
