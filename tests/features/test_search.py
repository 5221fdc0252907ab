"""Search and titles (DESIGN §4): real turns against the demo model, found by their words;
kept current per turn (a new turn, a sibling run, a forked session, a deleted one), rebuilt by
`braid reindex`, scoped to the caller. A new session is named by its first message's first
line until renamed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, call_action, new_session, run_turn
from server.agent.turn_context import first_line_title
from server.app.reindex import reindex
from server.features import fork, search, session_meta, sessions, subagents, timetravel
from server.store.search import tagged_terms


async def found(braid: Any, q: str, user_id: str = "local") -> list[tuple[str, str, int, str]]:
    hits = (await search.search(braid, user_id, q))["results"]
    return [(h["session_id"], h["run_id"], h["message_index"], h["role"]) for h in hits]


async def test_a_turn_s_messages_are_found_and_jump_to_their_run(braid: Any) -> None:
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "say the zebra crossing is open")
    rid = run["run_id"]
    assert await found(braid, "zebra") == [(sid, rid, 1, "assistant"), (sid, rid, 0, "user")]
    (hit, _) = (await search.search(braid, "local", "crossing open"))["results"]
    assert hit["title"] == "say the zebra crossing is open"
    assert hit["snippet"] == "the zebra «crossing» is «open»"
    # Tool calls and their results are not searched; the user's words and the answer are.
    run = await run_turn(braid, sid, "write giraffe.txt spotted")
    roles = [m["role"] for m in run["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert [(r[2], r[3]) for r in await found(braid, "giraffe")] == [(3, "assistant"),
                                                                      (0, "user")]


async def test_scoped_to_the_caller(braid: Any) -> None:
    mine, _ = await new_session(braid)
    theirs, _ = await new_session(braid, "other")
    await run_turn(braid, mine, "say okapi mine")
    await run_turn(braid, theirs, "say okapi theirs", user_id="other")
    assert {r[0] for r in await found(braid, "okapi")} == {mine}
    assert {r[0] for r in await found(braid, "okapi", "other")} == {theirs}
    assert await found(braid, "theirs") == []


async def test_sibling_runs_forked_sessions_deletes_and_archives(braid: Any) -> None:
    sid, _ = await new_session(braid)
    first = await run_turn(braid, sid, "say lemur one")
    # A regenerated answer: the new run's answer is found; its copy of the question is not
    # (the source run has it).
    started = await timetravel.continue_run(braid, "local", sid, first["run_id"],
                                            continue_from=1, fork=True, regenerate=True)
    active = braid.runs.find(sid, started["run_id"])
    await active.done.wait()
    assert sorted(await found(braid, "lemur")) == sorted([
        (sid, first["run_id"], 0, "user"), (sid, first["run_id"], 1, "assistant"),
        (sid, started["run_id"], 1, "assistant")])
    # A forked session holds the same messages; deleting the source drops only its rows.
    forked = (await fork.fork_session(braid, "local", sid))["session_id"]
    assert {r[0] for r in await found(braid, "lemur")} == {sid, forked}
    await session_meta.delete_session(braid, "local", sid)
    assert {r[0] for r in await found(braid, "lemur")} == {forked}
    # Archived sessions are left out (as in the sidebar), and come back unarchived.
    await call_action(braid, "local", forked, "update_session", archived=True)
    assert await found(braid, "lemur") == []
    await call_action(braid, "local", forked, "update_session", archived=False)
    assert len(await found(braid, "lemur")) == 3


async def test_a_sub_agent_s_turn_and_its_result_are_found(braid: Any) -> None:
    sid, _ = await new_session(braid)
    parent = await run_turn(braid, sid, "say parent turn")
    done = await subagents.spawn_sub_agent(braid, "local", sid, parent["run_id"],
                                           "say the dingo is found", label="dog")
    hits = (await search.search(braid, "local", "dingo"))["results"]
    # The child's question and answer (on its branch), and its result on the parent's.
    assert len(hits) == 3
    result = hits[0]
    assert (result["run_id"], result["role"], result["message_index"]) == (
        done["summary_run_id"], "assistant", 0)
    assert result["snippet"].endswith("the «dingo» is found")


async def test_reindex_rebuilds_it_from_git(braid: Any) -> None:
    sid, _ = await new_session(braid)
    for word in ("tapir", "quokka"):
        await run_turn(braid, sid, f"say {word} here")
    parent = (await run_turn(braid, sid, "say parent"))["run_id"]
    await subagents.spawn_sub_agent(braid, "local", sid, parent, "say dingo here", label="d")
    before = await found(braid, "here")
    assert len(before) == 7  # two turns, the sub-agent's and its result
    await braid.search.clear()
    assert await found(braid, "here") == []
    await reindex(braid)
    assert sorted(await found(braid, "here")) == sorted(before)


async def test_braid_reindex_rebuilds_it(make_braid: Any, tmp_path: Path) -> None:
    """`braid reindex` (the command) on a data dir whose search rows were lost."""
    data = tmp_path / "d"
    braid = await make_braid(data)
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say capybara")
    await braid.stop()
    with sqlite3.connect(data / "index.sqlite3") as db:
        # The triggers index each row's words with their owner's tag (Braid's function).
        db.create_function("braid_terms", 2, tagged_terms, deterministic=True)
        db.execute("DELETE FROM message_text")
    out = subprocess.run([sys.executable, "-m", "server.cli", "reindex", "--data-dir",
                          str(data)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    again = await make_braid(data)
    assert len(await found(again, "capybara")) == 2


async def test_an_index_without_search_is_rebuilt_at_start(make_braid: Any,
                                                           tmp_path: Path) -> None:
    """An index file from before search: its tables are made and filled at start-up."""
    braid = await make_braid(tmp_path / "d")
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say wombat")
    await braid.index.db.executescript(
        "DROP TABLE message_fts; DROP TABLE message_text;")
    await braid.stop()
    again = await make_braid(tmp_path / "d")
    assert len(await found(again, "wombat")) == 2


def test_title_is_the_first_line_of_the_first_message() -> None:
    assert first_line_title("\n  Fix the parser  \nand its tests") == "Fix the parser"
    assert first_line_title("x" * 59 + " yz") == "x" * 59
    assert len(first_line_title("w" * 200)) == 60
    assert first_line_title("   \n\t") == "Untitled"


async def test_new_session_named_by_its_first_message_until_renamed(braid: Any) -> None:
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "say first words   \nsecond line")
    (row,) = [r for r in await braid.index.list_sessions("local") if r["session_id"] == sid]
    assert row["title"] == "say first words"
    await call_action(braid, "local", sid, "update_session", title="My name")
    await run_turn(braid, sid, "say more")
    (row,) = [r for r in await braid.index.list_sessions("local") if r["session_id"] == sid]
    assert row["title"] == "My name"
    assert braid.store.get(sid).meta["title"] == "My name"
    # A session made with a title keeps it.
    made = await sessions.create_session(braid, "local", title="Given")
    await run_turn(braid, made["session_id"], "say hello")
    assert braid.store.get(made["session_id"]).meta["title"] == "Given"


async def test_on_a_team_server(make_braid: Any, pg_url: str) -> None:
    """PostgreSQL's full-text: a turn's messages found, scoped, rebuilt by reindex."""
    braid = await make_braid(database_url=pg_url)
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "say the manatee <b>floats</b>")
    rid = run["run_id"]
    assert await found(braid, "manatee") == [(sid, rid, 1, "assistant"), (sid, rid, 0, "user")]
    (hit, _) = (await search.search(braid, "local", "manat"))["results"]
    assert hit["snippet"] == "the «manatee» <b>floats</b>"
    assert await found(braid, "manatee", "other") == []
    await braid.search.clear()
    await reindex(braid)
    assert len(await found(braid, "manatee")) == 2
    await session_meta.delete_session(braid, "local", sid)
    assert await found(braid, "manatee") == []
