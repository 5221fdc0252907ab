"""Compaction (DESIGN §4): a long branch is sent old tool output masked first, then a
summary in place of its oldest runs, made by the model as a `compaction` run of its own (the
demo answers `summary: ` + the first lines it was sent); git keeps every message, `compact`
does it on demand, and continuing from before it gives the full context back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import call_action, git, new_session, run_turn
from server.base.errors import Conflict
from server.features.timetravel import continue_run_to_end
from server.store import context

FILLER = "lorem ipsum dolor sit amet " * 12  # ~80 tokens a message, on its second line


def answer(run: Any) -> str:
    return str(run["messages"][-1]["content"])


def kinds(path: Path, ref: str = "HEAD") -> list[str]:
    out = git(path, "log", "--format=%(trailers:key=Braid-Kind,valueonly)", ref)
    return [k for k in out.split() if k]


def records(path: Path, ref: str = "HEAD") -> list[dict[str, Any]]:
    names = git(path, "ls-tree", "-r", "--name-only", ref, "runs/").split()
    return [json.loads(git(path, "show", f"{ref}:{n}")) for n in names]


def compactions(path: Path, ref: str = "HEAD") -> list[dict[str, Any]]:
    found = [r for r in records(path, ref) if r.get("kind") == "compaction"]
    return sorted(found, key=lambda r: r["created_at"])


@pytest.mark.slow
async def test_forty_turns_later_the_model_gets_the_summary_and_the_newest_turns(
        make_braid: Any) -> None:
    braid = await make_braid(context_tokens=4000)
    sid, path = await new_session(braid)
    for i in range(40):
        done = await run_turn(braid, sid, f"say m{i}\n{FILLER}")
        assert done["status"] == "COMPLETED" and "warning" not in done
        assert done["context"]["tokens"] <= 4000
    made = compactions(path)
    assert made, kinds(path)
    last = made[-1]
    assert last["status"] == "COMPLETED" and last["summary"].startswith("summary: say m0 | ")
    assert last["covers"]["from_run"] and last["covers"]["turns"] >= 10
    assert kinds(path).count("compaction") == len(made)

    recalled = answer(await run_turn(braid, sid, "recall")).split(" | ")
    assert recalled[-1] == "recall"
    newest = [r.split("\n")[0] for r in recalled[:-1]]
    assert 3 < len(newest) < 40 and newest == [f"say m{i}" for i in range(40 - len(newest), 40)]

    notes = answer(await run_turn(braid, sid, "notes"))
    assert notes.startswith("Summary of the earlier conversation: summary: say m0 | say m1 | ")
    summarized = notes.split(" | ")
    assert "say m10" in summarized  # the earlier summary's turns stay in the later one
    # The transcript in git holds every message: 40 turns of two, the summaries, the two
    # questions asked since.
    names = git(path, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    assert len(names) == 2 * 42 + len(compactions(path))
    users = [n for n in names if "-user-" in n]
    assert len(users) == 42


async def test_old_tool_output_is_masked_before_any_summary(make_braid: Any) -> None:
    braid = await make_braid(context_tokens=3000)
    sid, path = await new_session(braid)
    (path / "workdir" / "big.txt").write_text("x" * 2000 + "\n")  # ~500 tokens a read
    for _ in range(4):
        done = await run_turn(braid, sid, "read big.txt")
    used = done["context"]
    assert used["masked_messages"] >= 1 and used["omitted_messages"] == 0, used
    assert used["tokens"] <= 3000
    assert compactions(path) == []
    # The newest result went whole: its turn's answer is made from it.
    assert answer(done) == "done: read big.txt"


async def test_compact_on_demand_and_continuing_from_before_it(braid: Any) -> None:
    sid, path = await new_session(braid)
    with pytest.raises(Conflict):
        await call_action(braid, "local", sid, "compact")
    runs = [await run_turn(braid, sid, f"say t{i}") for i in range(4)]
    made = await call_action(braid, "local", sid, "compact")
    (record,) = compactions(path)
    assert record["run_id"] == made["run_id"]
    assert record["summary"] == "summary: say t0 | say t1 | say t2"  # all but the newest run
    assert record["covers"] == {"from_run": runs[0]["run_id"], "to_run": runs[2]["run_id"],
                                "turns": 3, "until": 6}
    assert kinds(path)[0] == "compaction"
    log = git(path, "log", "-1", "--format=%B")
    assert "3 earlier turns summarized" in log and f"Braid-Run: {made['run_id']}" in log

    recall = await run_turn(braid, sid, "recall")
    assert answer(recall) == "say t3 | recall"
    assert recall["context"]["summary_run_id"] == made["run_id"]
    assert recall["context"]["parts"]["summary"] > 0
    notes = answer(await run_turn(braid, sid, "notes"))
    assert notes == "Summary of the earlier conversation: summary: say t0 | say t1 | say t2"

    # Continuing from a message before the compaction: the full context, no summary.
    sibling = await continue_run_to_end(braid, "local", sid, runs[2]["run_id"], input="recall")
    assert answer(sibling) == "say t0 | say t1 | say t2 | recall"
    assert "summary_run_id" not in sibling["context"]

    # A second compaction takes the first one's summary in.
    from server.features.sessions import checkout

    await checkout(braid, "local", sid, "main")
    await run_turn(braid, sid, "say t4")
    await call_action(braid, "local", sid, "compact")
    second = compactions(path)[-1]
    assert second["summary"].startswith("summary: say t0 | say t1 | say t2 | say t3 | recall")
    assert second["covers"]["from_run"] == runs[0]["run_id"]
    assert second["covers"]["turns"] == 3 + 3  # t3, recall, notes


async def test_compact_over_http(server: Any) -> None:
    sid = server.new_session()
    for text in ("say a", "say b"):
        server.run(sid, text)
    status, body = server.api("POST", f"/api/sessions/{sid}/compact", {})
    assert status == 200, body
    assert compactions(server.session_path(sid))[0]["run_id"] == body["run_id"]
    status, body = server.api("POST", "/api/sessions/ffffffffffffffffffffffffffffffff/compact",
                              {})
    assert status == 404, body


def test_the_window_masks_then_leaves_out() -> None:
    """fit_window: whole when it fits; else the newest whole and older tool output masked;
    else the oldest left out, never a result without its call, the newest user message kept."""
    msgs: list[Any] = []
    for i in range(10):
        msgs += [{"role": "user", "content": f"q{i}"},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"id": f"c{i}", "function": {"name": "read_file", "arguments": "{}"}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": "y" * 800},
                 {"role": "assistant", "content": "ok"}]
    win = context.Window([context.Span(msgs, 0, len(msgs), context.sums_of(msgs))])
    everything = win.total("full", win.n)
    assert context.fit_window(win, everything).masked == []
    fitted = context.fit_window(win, everything // 2)
    assert fitted.omitted == 0 and fitted.masked_count >= 5
    assert fitted.tokens <= everything // 2
    assert fitted.whole[-1] is msgs[-1] and fitted.whole[-2]["content"] == "y" * 800
    tight = context.fit_window(win, 120)
    assert tight.omitted > 0
    sent = tight.masked + tight.whole
    assert sent[0]["role"] != "tool" and sent[-4]["content"] == "q9"


def test_a_branch_longer_than_the_budget_is_summarized_part_by_part() -> None:
    """parts_of: the covered messages in parts that each fit one summary call whole (none
    left out), cut at runs' starts, oldest first, together all of them."""
    from server.agent.compaction import request as compaction

    covered: list[Any] = []
    for i in range(300):
        run = f"r{i}"
        covered += [{"role": "user", "content": f"read f{i}", "run_id": run},
                    {"role": "assistant", "content": "", "run_id": run, "tool_calls": [
                        {"id": f"c{i}", "function": {"name": "read_file", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": "z" * 1500,
                     "run_id": run},
                    {"role": "assistant", "content": "ok", "run_id": run}]
    heads = [compaction.SYSTEM_PROMPT]
    parts = compaction.parts_of(covered, heads, 8000)
    assert len(parts) > 3 and parts[0][0] == 0 and parts[-1][1] == len(covered)
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    earlier = "summary: of the parts before " + "w" * 4000
    for start, end in parts:
        assert start == 0 or covered[start]["run_id"] != covered[start - 1]["run_id"]
        request = compaction.summary_request(earlier, covered[start:end], heads, 8000)
        assert request.use["omitted_messages"] == 0 and request.use["tokens"] <= 8000
        assert request.messages[-1]["content"].startswith("Summarize the conversation so far")
