"""The context budget (DESIGN §4): the model is sent the newest messages that fit, cut at a
tool-call-safe boundary, with one note saying how many were left out; git keeps them all."""

from __future__ import annotations

import json
import random
from typing import Any

from conftest import git, new_session, run_turn
from server.base.settings import Settings
from server.store import context

FILLER = "lorem ipsum dolor sit amet " * 12  # ~80 tokens a message


async def test_a_long_session_sends_only_the_newest_messages_and_a_note(make_braid: Any
                                                                         ) -> None:
    # Compaction off: the oldest left out with a note, as when a summary cannot be made.
    braid = await make_braid(context_tokens=3300, compaction=False)
    sid, path = await new_session(braid)
    for i in range(40):
        await run_turn(braid, sid, f"say m{i} {FILLER}")
    done = await run_turn(braid, sid, "recall")
    recalled = done["messages"][-1]["content"].split(" | ")
    assert recalled[-1] == "recall"
    shown = [r.split(" ", 2)[1] for r in recalled[:-1]]
    assert 5 < len(shown) < 20  # only the newest fit 3,300 tokens (tool definitions too)
    assert shown == [f"m{i}" for i in range(40 - len(shown), 40)]
    context_used = done["context"]
    assert context_used["omitted_messages"] == 81 - context_used["sent_messages"]
    assert context_used["tokens"] <= 3300 and context_used["budget"] == 3300

    notes = await run_turn(braid, sid, "notes")
    text = notes["messages"][-1]["content"]
    assert text.startswith("Context budget: the ") and "earliest messages" in text
    # Nothing was deleted: git holds every message.
    names = git(path, "ls-tree", "-r", "--name-only", "HEAD", "history/").split()
    assert len(names) == 2 * 42
    record_path = f"runs/000/00/{done['run_id']}.json"
    record = json.loads(git(path, "show", f"HEAD:{record_path}"))
    assert record["context"] == context_used


async def test_a_short_session_sends_everything(braid: Any) -> None:
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say one")
    done = await run_turn(braid, sid, "recall")
    assert done["messages"][-1]["content"] == "say one | recall"
    assert done["context"]["omitted_messages"] == 0 and done["context"]["budget"] == 32000
    assert (await run_turn(braid, sid, "notes"))["messages"][-1]["content"] == "no notes"


def test_the_cut_never_separates_a_tool_result_from_its_call() -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "read_file", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "x" * 400}
    history = [{"role": "user", "content": "old " * 200}, call, result,
               {"role": "assistant", "content": "done"}, {"role": "user", "content": "new"}]
    budget = context.estimate(result) + 60
    kept, used = context.fit([history], budget, 10)
    assert kept and kept[0]["role"] != "tool"
    assert kept[-1]["content"] == "new"
    assert used["omitted_messages"] == len(history) - len(kept)
    # The newest user message is always sent, however small the budget.
    kept, used = context.fit([history], 1, 10)
    assert [m["content"] for m in kept] == ["new"] and used["omitted_messages"] == 4


def test_the_cut_found_by_bisection_is_the_walk_s_cut() -> None:
    """With the running totals of the earlier messages' estimates (kept with the branch's
    listing), `fit` bisects them instead of walking: the same messages, the same figures."""
    rng = random.Random(9)
    for case in range(300):
        prior: list[dict[str, Any]] = []
        for i in range(rng.randrange(0, 60)):
            role = rng.choice(["user", "assistant", "tool", "assistant", "system"])
            msg: dict[str, Any] = {"role": role, "content": "w" * rng.randrange(0, 300)}
            if role == "assistant" and rng.random() < 0.4:
                msg["tool_calls"] = [{"id": f"c{i}", "function": {"name": "read_file",
                                                                  "arguments": "{}"}}]
            prior.append(msg)
        turn = [{"role": rng.choice(["user", "system"]), "content": "n" * rng.randrange(50)}
                for _ in range(rng.randrange(0, 3))]
        if rng.random() < 0.8:
            turn.append({"role": "user", "content": "now " * rng.randrange(1, 40)})
        turn += [{"role": "tool", "content": "r" * rng.randrange(90)}
                 for _ in range(rng.randrange(0, 2))]
        sums = [0]
        for msg in prior:
            sums.append(sums[-1] + context.estimate(msg))
        budget = rng.choice([1, 50, 200, 600, 2000, 10**6])
        walked = context.fit((prior, turn), budget, 12)
        bisected = context.fit((prior, turn), budget, 12, sums)
        assert [id(m) for m in bisected[0]] == [id(m) for m in walked[0]], case
        assert bisected[1] == walked[1], case


async def test_the_running_totals_follow_the_branch(braid: Any) -> None:
    """layout.message_sums: kept with the history listing, extended by each turn, moved with
    a checkout, always the totals of the branch's messages' estimates."""
    from server.features.timetravel import continue_run_to_end
    from server.store import layout

    sid, _ = await new_session(braid)
    first = await run_turn(braid, sid, "say one")
    for text in ("write a.txt two", "say three"):
        await run_turn(braid, sid, text)
    handle = braid.store.get(sid)

    def totals(git: Any) -> tuple[list[int], list[int]]:
        expect = [0]
        for msg in layout.messages(git):
            expect.append(expect[-1] + context.estimate(msg))
        return list(layout.message_sums(git)), expect

    kept, expect = await handle.call(totals)
    assert kept == expect and len(kept) == 1 + 4 + 6 - 2  # 3 turns, one with a tool batch
    # A sibling run of the first turn: its branch holds fewer messages, then more.
    await continue_run_to_end(braid, "local", sid, first["run_id"], input="say again")
    kept, expect = await handle.call(totals)
    assert kept == expect and len(kept) < 10


def test_the_setting_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).context_tokens == 32000
    assert Settings.from_env({"BRAID_CONTEXT_TOKENS": "2000"}).context_tokens == 2000
    for bad in ("lots", "-5", "12"):
        try:
            Settings.from_env({"BRAID_CONTEXT_TOKENS": bad})
        except ValueError as e:
            assert "BRAID_CONTEXT_TOKENS" in str(e)
        else:
            raise AssertionError(bad)
