"""Search over message text, on both backends: SQLite's FTS5 (the default) and PostgreSQL's
full-text (BRAID_DATABASE_URL). The same tests, the same answers: scoped to the caller,
archived sessions left out, newest first, the match marked, and no query ever an error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.base.errors import BadRequest
from server.store.search import (
    SearchRow,
    SqliteSearch,
    branch_rows,
    query_words,
    run_rows,
    search_statement,
)

# `pg` by hand: the cluster is asked for inside the test, out of sight of conftest's marking.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)]
HOSTILE = ['"', '""', "'", "*", "zebra*", "NEAR(", "NEAR(zebra crossing", "-zebra", "zebra -",
           "a OR", "AND", "NOT zebra", "(zebra", "zebra)", "^zebra", "zebra:", "text:zebra",
           "{zebra}", "\\", "%", "_", "&", "|", "!", "<->", "zebra:*", "'zebra'", "\x00",
           "🦓", "zébra", "斑马", "zebra\u200b", "   ", "", "-", "+", "a" * 1000]


@pytest.fixture(params=BACKENDS)
async def search(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        from server.store.index import Index
        from server.store.search import SqliteSearch

        idx: Any = Index(tmp_path / "index.sqlite3")
        found: Any = SqliteSearch(idx)
    else:
        from server.backends.pg_index import PgIndex
        from server.backends.pg_search import PgSearch

        idx = PgIndex(request.getfixturevalue("pg_url"))
        found = PgSearch(idx)
    await idx.open()
    assert await found.open() is True  # new: start-up reindexes it
    assert await found.open() is False
    found.sessions = idx  # the sessions' rows (their user, title, archived) are the index's
    yield found
    await idx.close()


def meta(sid: str, user: str = "local", **extra: Any) -> dict[str, Any]:
    return {"session_id": sid, "user_id": user, "title": extra.pop("title", f"title {sid}"),
            "created_at": "2026-01-01T00:00:00Z", "forked_from_session_id": None,
            "root_session_id": sid, **extra}


def msg(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": "m", "role": role, "content": content, "run_id": "r",
            "created_at": "2026-01-01T00:00:00Z", **extra}


async def test_rows_are_user_and_assistant_text_numbered_in_their_run() -> None:
    msgs = [msg("system", "a note"), msg("user", "hello zebra"),
            msg("assistant", None, tool_calls=[{"id": "c"}]),
            msg("tool", "zebra.txt written", tool_call_id="c"),
            msg("assistant", "done, zebra"), msg("user", "copied", copied_from="x")]
    assert run_rows("s", "r", msgs) == [SearchRow("s", "r", 1, "user", "hello zebra"),
                                        SearchRow("s", "r", 4, "assistant", "done, zebra")]
    # A branch: each message numbered within its own run.
    branch = [{**msg("user", "one"), "run_id": "a"}, {**msg("assistant", "two"), "run_id": "a"},
              {**msg("user", "three"), "run_id": "b"}]
    assert branch_rows("s", branch) == [SearchRow("s", "a", 0, "user", "one"),
                                        SearchRow("s", "a", 1, "assistant", "two"),
                                        SearchRow("s", "b", 0, "user", "three")]


async def test_finds_words_newest_first_with_the_match_marked(search: Any) -> None:
    await search.sessions.upsert_session(meta("s1"))
    await search.sessions.upsert_session(meta("s2", title="Second"))
    await search.add([SearchRow("s1", "r1", 0, "user", "Where does the Zebra live?"),
                      SearchRow("s1", "r1", 1, "assistant", "The zebra lives in Africa.")])
    await search.add([SearchRow("s2", "r2", 0, "user", "Tell me about zebras & <b>lions</b>")])
    hits = await search.search("local", "zebra", 20)
    # The last word is a prefix (results while typing): "zebras" too.
    assert [(h["session_id"], h["run_id"], h["message_index"], h["role"]) for h in hits] == [
        ("s2", "r2", 0, "user"), ("s1", "r1", 1, "assistant"), ("s1", "r1", 0, "user")]
    assert hits[0]["title"] == "Second"
    assert "«zebras»" in hits[0]["snippet"] and "<b>lions</b>" in hits[0]["snippet"]
    assert "«Zebra»" in hits[2]["snippet"]
    # Every word must be there; case does not matter.
    assert [h["message_index"] for h in await search.search("local", "ZEBRA africa", 20)] == [1]
    assert await search.search("local", "zebra giraffe", 20) == []
    assert len(await search.search("local", "zebra", 2)) == 2
    # The last word a prefix from two letters on; one letter is a word of its own.
    assert len(await search.search("local", "af", 20)) == 1
    assert await search.search("local", "a", 20) == []


async def test_scoped_to_the_caller_and_archived_sessions_left_out(search: Any) -> None:
    await search.sessions.upsert_session(meta("mine"))
    await search.sessions.upsert_session(meta("theirs", user="other"))
    await search.add([SearchRow("mine", "r", 0, "user", "secret plan"),
                      SearchRow("theirs", "q", 0, "user", "secret other plan")])
    assert [h["session_id"] for h in await search.search("local", "secret", 20)] == ["mine"]
    assert [h["session_id"] for h in await search.search("other", "secret", 20)] == ["theirs"]
    assert await search.search("nobody", "secret", 20) == []
    await search.sessions.upsert_session(meta("mine", archived=True))
    assert await search.search("local", "secret", 20) == []
    await search.sessions.upsert_session(meta("mine", archived=False))  # back again
    assert len(await search.search("local", "secret", 20)) == 1


async def test_hostile_queries_never_fail(search: Any) -> None:
    await search.sessions.upsert_session(meta("s"))
    await search.add([SearchRow("s", "r", 0, "user", "zebra crossing ahead, zébra 斑马 🦓")])
    for q in HOSTILE:
        assert isinstance(await search.search("local", q, 20), list), q
    # The words in them still count; operators are plain words or dropped.
    assert len(await search.search("local", '"zebra', 20)) == 1
    assert len(await search.search("local", "(zebra) crossing*", 20)) == 1
    assert len(await search.search("local", "-zebra", 20)) == 1
    assert len(await search.search("local", "斑马", 20)) == 1
    assert await search.search("local", '"*"', 20) == []
    assert await search.search("local", "", 20) == []  # no word: nothing found
    with pytest.raises(BadRequest):
        await search.search("local", "a" * 1001, 20)


async def test_kept_current_copied_deleted_and_cleared(search: Any) -> None:
    await search.sessions.upsert_session(meta("s"))
    await search.add([SearchRow("s", "r", 0, "user", "first draft")])
    await search.add([SearchRow("s", "r", 0, "user", "first draft"),  # again: no change
                      SearchRow("s", "r", 1, "assistant", "second thought")])
    assert len(await search.search("local", "first", 20)) == 1
    await search.add([SearchRow("s", "r", 1, "assistant", "third time")])  # replaced
    assert await search.search("local", "second", 20) == []
    assert len(await search.search("local", "third", 20)) == 1
    await search.sessions.upsert_session(meta("f"))
    await search.copy_session("s", "f")
    await search.copy_session("s", "f")  # twice: one row each
    assert sorted(h["session_id"] for h in await search.search("local", "third", 20)) == \
        ["f", "s"]
    await search.delete_session("s")
    assert [h["session_id"] for h in await search.search("local", "third", 20)] == ["f"]
    await search.clear()
    assert await search.search("local", "third", 20) == []


async def test_a_fork_shares_its_source_s_rows_up_to_the_fork(search: Any) -> None:
    """A fork finds what its source said before the fork (and a fork of that fork too),
    not what the source says after; deleting a source in the middle loses its forks
    nothing."""
    for sid in ("s", "f", "g"):
        await search.sessions.upsert_session(meta(sid))
    await search.add([SearchRow("s", "r1", 0, "user", "walrus before")])
    await search.copy_session("s", "f")
    await search.add([SearchRow("s", "r2", 0, "user", "walrus after"),
                      SearchRow("f", "r3", 0, "user", "walrus forked")])
    await search.copy_session("f", "g")
    await search.add([SearchRow("f", "r4", 0, "user", "walrus later")])

    async def hits() -> set[tuple[str, str]]:
        return {(h["session_id"], h["run_id"]) for h in await search.search("local", "walrus", 50)}

    assert await hits() == {("s", "r1"), ("s", "r2"), ("f", "r1"), ("f", "r3"), ("f", "r4"),
                            ("g", "r1"), ("g", "r3")}
    await search.delete_session("f")
    assert await hits() == {("s", "r1"), ("s", "r2"), ("g", "r1"), ("g", "r3")}
    await search.delete_session("s")
    assert await hits() == {("g", "r1"), ("g", "r3")}
    hit = (await search.search("local", "forked", 5))[0]
    assert hit["snippet"] == "walrus «forked»" and hit["session_id"] == "g"


async def _work(search: Any, user_id: str, q: str) -> tuple[int, int]:
    """What a search does, not how long it takes: (the matches the full-text index hands
    back, and SQLite's VM steps for the whole query | PostgreSQL's rows the GIN index hands
    back, and the most rows a step of the plan reads)."""
    words = query_words(q)
    if isinstance(search, SqliteSearch):
        db = search.index.db
        sql, args = search_statement(user_id, words, 20)
        async with db.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH ?",
                              (args[0],)) as cur:
            (matched,) = await cur.fetchone()
        steps = 0

        def step() -> int:
            nonlocal steps
            steps += 1
            return 0
        await db.set_progress_handler(step, 1)
        async with db.execute(sql, args) as cur:
            await cur.fetchall()
        await db.set_progress_handler(None, 1)
        return int(matched), steps
    from server.backends.pg_search import SEARCH_SQL, search_args

    args = search_args(user_id, words, 20)
    async with search.index.pool.acquire() as db, db.transaction():
        # What the full-text index alone hands back (a small table's plan may not use it).
        await db.execute("SET LOCAL enable_seqscan = off")
        matched = await db.fetchval(
            "SELECT count(*) FROM message_text WHERE tsv @@ "
            "braid_tagged_query($2, to_tsquery('simple', $1))", args[0], args[3])
        await db.execute("RESET enable_seqscan")
        (plan,) = json.loads(await db.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + SEARCH_SQL, *args))
    nodes, todo = [], [plan["Plan"]]
    while todo:
        nodes.append(node := todo.pop())
        todo += node.get("Plans", [])
    # Whatever plan PostgreSQL chose: the most rows any step read of the message table.
    read = [(n["Actual Rows"] + n.get("Rows Removed by Filter", 0)
             + n.get("Rows Removed by Index Recheck", 0)) * n["Actual Loops"] for n in nodes
            if n.get("Relation Name") == "message_text"
            or str(n.get("Index Name", "")).startswith("message_text")]
    assert read, json.dumps(plan, indent=1)
    return int(matched), max(read)


async def test_another_user_s_matches_are_never_walked(search: Any) -> None:
    """Search filters by user before it walks a match (issue 34): the same work for the
    caller's query whether another user's chats hold the word never or 300 times."""
    await search.sessions.upsert_session(meta("mine"))
    await search.sessions.upsert_session(meta("theirs", user="other"))
    await search.add([SearchRow("mine", "r", i, "user", f"zebra number {i}") for i in range(3)])
    before = await _work(search, "local", "zebra")
    hits = await search.search("local", "zebra", 20)
    assert before[0] == 3 and before[1] > 0 and len(hits) == 3
    await search.add([SearchRow("theirs", "q", i, "user", f"zebra zebras {i}")
                      for i in range(300)])
    assert await _work(search, "local", "zebra") == before
    assert await search.search("local", "zebra", 20) == hits
    # Theirs are found by them, all of them (the limit aside), and only theirs.
    assert (await _work(search, "other", "zebra"))[0] == 300
    assert {h["session_id"] for h in await search.search("other", "zebra", 100)} == {"theirs"}


async def test_an_older_index_without_owners_is_made_anew(search: Any) -> None:
    """An index from before the owners' tags: its search table is dropped and made again,
    and `open` says so (start-up then refills it from git)."""
    if isinstance(search, SqliteSearch):
        await search.index.db.executescript(
            "DROP TABLE message_fts; DROP TABLE message_text; CREATE TABLE message_text "
            "(id INTEGER PRIMARY KEY, session_id TEXT, run_id TEXT, message_index INTEGER, "
            "role TEXT, text TEXT);")
    else:
        await search.index.pool.execute(
            "ALTER TABLE message_text DROP COLUMN tsv, DROP COLUMN owner")
    assert await search.open() is True
    assert await search.open() is False
    await search.sessions.upsert_session(meta("s"))
    await search.add([SearchRow("s", "r", 0, "user", "narwhal")])
    assert len(await search.search("local", "narwhal", 20)) == 1
