"""The message queue's table, on both backends (SQLite in the index file; PostgreSQL for a
team server): order, edit and remove only while waiting, a claim taken exactly once however
many claimants race for it, and the claims a dead process left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

# `pg` by hand: the cluster is asked for inside the fixture, out of sight of conftest's marking.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)]


@pytest.fixture(params=BACKENDS)
async def queues(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Two queues on one database, as two processes would hold them (owners A and B)."""
    if request.param == "sqlite":
        from server.store.index import Index
        from server.store.queue import SqliteQueue

        index: Any = Index(tmp_path / "index.sqlite3")
        await index.open()
        pair: tuple[Any, Any] = (SqliteQueue(index, "A"), SqliteQueue(index, "B"))
        closing = [index]
    else:
        from server.backends.pg_index import PgIndex
        from server.backends.pg_queue import PgQueue
        from server.backends.pg_team import SCHEMA

        url = request.getfixturevalue("pg_url")
        ia, ib = PgIndex(url), PgIndex(url)
        await ia.open()
        await ib.open()
        await ia.pool.execute(SCHEMA)  # braid_processes: whose claims are stale
        await ia.pool.execute("INSERT INTO braid_processes (owner_id, pid, host) VALUES "
                              "('A', 1, 'h'), ('B', 2, 'h')")
        pair = (PgQueue(ia, "A"), PgQueue(ib, "B"))
        closing = [ia, ib]
    for q in pair:
        await q.open()
    yield pair
    for index in closing:
        await index.close()


async def test_order_edit_remove(queues: Any) -> None:
    q, _ = queues
    rows = [await q.add("s1", "main", f"m{i}") for i in range(3)]
    await q.add("s2", "main", "elsewhere")
    assert [r["text"] for r in await q.waiting("s1")] == ["m0", "m1", "m2"]
    assert len({r["queued_id"] for r in rows}) == 3
    assert await q.update("s1", rows[1]["queued_id"], "M1") is True
    assert await q.update("s2", rows[1]["queued_id"], "other session") is False
    assert await q.remove("s1", rows[0]["queued_id"]) is True
    assert await q.remove("s1", rows[0]["queued_id"]) is False
    assert [r["text"] for r in await q.waiting("s1")] == ["M1", "m2"]
    assert await q.has_waiting("s1", "main") and not await q.has_waiting("s1", "other")
    claimed = await q.claim("s1", "main")
    assert claimed["text"] == "M1" and claimed["claimed_by"] == q.owner
    # Claimed: being started, so neither listed, edited nor removed.
    assert await q.update("s1", claimed["queued_id"], "late") is False
    assert await q.remove("s1", claimed["queued_id"]) is False
    assert [r["text"] for r in await q.waiting("s1")] == ["m2"]
    await q.done(claimed["queued_id"])
    assert sorted(await q.branches_waiting()) == [("s1", "main"), ("s2", "main")]
    await q.delete_session("s2")
    assert await q.branches_waiting() == [("s1", "main")]


async def test_a_claim_is_taken_once(queues: Any) -> None:
    a, b = queues
    for i in range(5):
        await a.add("s", "main", f"m{i}")
    got = await asyncio.gather(*(q.claim("s", "main") for q in (a, b) * 8))
    texts = [r["text"] for r in got if r is not None]
    assert sorted(texts) == [f"m{i}" for i in range(5)]  # each once, none lost
    assert await a.claim("s", "main") is None


async def test_stale_claims_wait_again_in_their_place(queues: Any) -> None:
    a, b = queues
    first = await a.add("s", "main", "first")
    await a.add("s", "main", "second")
    assert (await a.claim("s", "main"))["queued_id"] == first["queued_id"]
    assert await a.stale_claims() == []  # its own claim is live
    if hasattr(b.index, "pool"):  # PostgreSQL: A stops beating, so its claims go stale
        await b.index.pool.execute(
            "UPDATE braid_processes SET seen_at = now() - interval '1 hour' "
            "WHERE owner_id = 'A'")
    stale = await b.stale_claims()
    assert [r["queued_id"] for r in stale] == [first["queued_id"]]
    await b.unclaim(first["queued_id"])
    assert [r["text"] for r in await b.waiting("s")] == ["first", "second"]
    assert (await b.claim("s", "main"))["text"] == "first"


async def test_claims_racing_the_index_s_other_writes_lose_none(queues: Any) -> None:
    """Claims, queue listings, run rows and search rows from many tasks at once on the one
    index connection: none fails, none is lost. (A claim's `UPDATE … RETURNING` read in a
    second call was in progress when another task committed: "cannot commit transaction -
    SQL statements in progress" and "bad parameter or other API misuse" lost the index and
    search rows of runs in a flood of sub-agents, issue 34.)"""
    from server.store.search import SearchRow

    a, b = queues
    index = a.index
    search: Any
    if hasattr(index, "pool"):
        from server.backends.pg_search import PgSearch
        search = PgSearch(index)
    else:
        from server.store.search import SqliteSearch
        search = SqliteSearch(index)
    await search.open()
    await index.upsert_session({"session_id": "s", "user_id": "u", "title": "",
                                "created_at": "2026-01-01T00:00:00Z"})
    for i in range(40):
        await a.add("s", "main", f"m{i}")

    async def claimer(q: Any) -> list[str]:
        got = []
        while (row := await q.claim("s", "main")) is not None:
            got.append(row["text"])
            await q.waiting("s")
        return got

    async def writer(k: int) -> None:
        for i in range(10):
            run_id = f"r{k}-{i}"
            await search.add([SearchRow("s", run_id, 0, "user", f"word{k}x{i} here")])
            await index.upsert_run("s", {"run_id": run_id, "status": "COMPLETED",
                                         "branch": "main", "created_at": "2026-01-01"})

    got = await asyncio.gather(*(claimer(q) for q in (a, b) * 3),
                               *(writer(k) for k in range(4)))
    claimed = [t for texts in got[:6] for t in texts]
    assert sorted(claimed) == sorted(f"m{i}" for i in range(40))
    assert len(await index.list_runs("s")) == 40
    for k in range(4):
        found = await search.search("u", f"word{k}x9", 10)
        assert [h["run_id"] for h in found] == [f"r{k}-9"], found
