"""The index, on both backends: SQLite (the default) and PostgreSQL (BRAID_DATABASE_URL).
The same tests, the same answers; and `braid reindex` rebuilds either from git alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, new_session, run_turn

# `pg` by hand: the cluster is asked for inside the test, out of sight of conftest's marking.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)]


@pytest.fixture(params=BACKENDS)
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        from server.store.index import Index

        idx: Any = Index(tmp_path / "index.sqlite3")
    else:
        from server.backends.pg_index import PgIndex

        idx = PgIndex(request.getfixturevalue("pg_url"))
    assert await idx.open() is True  # new: start-up reindexes it
    yield idx
    await idx.close()


def meta(sid: str, user: str = "local", **extra: Any) -> dict[str, Any]:
    return {"session_id": sid, "user_id": user, "title": extra.pop("title", ""),
            "created_at": extra.pop("created_at", "2026-01-01T00:00:00Z"),
            "forked_from_session_id": None, "root_session_id": sid, **extra}


def run(run_id: str, **extra: Any) -> dict[str, Any]:
    return {"run_id": run_id, "status": "RUNNING", "branch": "main",
            "created_at": extra.pop("created_at", "2026-01-01T00:00:01Z"), **extra}


async def test_sessions_listed_newest_first_per_user_with_search(index: Any) -> None:
    await index.upsert_session(meta("a", title="alpha 50%_off", created_at="2026-01-01"))
    await index.upsert_session(meta("b", title="beta", created_at="2026-01-02"))
    await index.upsert_session(meta("c", user="other", title="alpha", created_at="2026-01-03"))
    rows = await index.list_sessions("local")
    assert [r["session_id"] for r in rows] == ["b", "a"]
    assert rows[0]["archived"] is False and rows[0]["title"] == "beta"
    assert [r["session_id"] for r in await index.list_sessions("local", "alpha")] == ["a"]
    # LIKE's wildcards in the query are plain characters.
    assert [r["session_id"] for r in await index.list_sessions("local", "50%_")] == ["a"]
    assert await index.list_sessions("local", "5_%") == []
    assert await index.list_sessions("nobody") == []


async def test_upsert_replaces_and_archived_is_a_boolean(index: Any) -> None:
    await index.upsert_session(meta("a", title="one"))
    await index.upsert_session(meta("a", title="two", archived=True, model="m"))
    assert await index.list_sessions("local") == []
    (row,) = await index.list_sessions("local", archived=True)
    assert (row["title"], row["archived"], row["model"]) == ("two", True, "m")


async def test_runs_upserted_listed_by_status_and_copied(index: Any) -> None:
    await index.upsert_session(meta("s"))
    await index.upsert_run("s", run("r1", created_at="2026-01-01T00:00:01Z"))
    await index.upsert_run("s", run("r2", created_at="2026-01-01T00:00:02Z",
                                    forked_from_run_id="r1", forked_from_message_index=2))
    await index.upsert_run("s", run("r1", status="COMPLETED",
                                    updated_at="2026-02-01T00:00:00Z"))
    rows = await index.list_runs("s")
    assert [(r["run_id"], r["status"]) for r in rows] == [("r1", "COMPLETED"),
                                                          ("r2", "RUNNING")]
    assert rows[1]["forked_from_run_id"] == "r1" and rows[1]["forked_from_message_index"] == 2
    # A run's update moves its session's updated_at forward, never back.
    (session,) = await index.list_sessions("local")
    assert session["updated_at"] == "2026-02-01T00:00:00Z"
    assert [r["run_id"] for r in await index.runs_with_status("RUNNING")] == ["r2"]
    await index.upsert_session(meta("t"))
    await index.copy_runs("s", "t")
    assert [r["run_id"] for r in await index.list_runs("t")] == ["r1", "r2"]
    await index.copy_runs("s", "t")  # twice: still one row per run
    assert len(await index.list_runs("t")) == 2


async def test_forks_and_new_runs_are_read_without_the_session_s_other_runs(
        index: Any) -> None:
    from server.store.lineage import sibling_map

    await index.upsert_session(meta("s"))
    for i in range(6):
        await index.upsert_run("s", run(f"r{i}", created_at=f"2026-01-01T00:00:0{i}Z"))
    # r4 forked from r1, r5 from r4 (a fork of a fork); r0, r2, r3 have no siblings.
    await index.upsert_run("s", run("r4", created_at="2026-01-01T00:00:04Z",
                                    forked_from_run_id="r1", forked_from_message_index=1))
    await index.upsert_run("s", run("r5", created_at="2026-01-01T00:00:05Z",
                                    forked_from_run_id="r4", forked_from_message_index=3))
    await index.upsert_session(meta("t"))
    await index.upsert_run("t", run("r1"))  # another session's run of the same id
    lineage = await index.lineage_runs("s")
    assert [r["run_id"] for r in lineage] == ["r1", "r4", "r5"]
    everything = await index.list_runs("s")
    assert sibling_map(lineage) == sibling_map(everything)
    assert sibling_map(lineage)["r5"]["position"] == 3
    assert await index.lineage_runs("t") == []
    since = await index.runs_since("s", "2026-01-01T00:00:04Z")
    assert [r["run_id"] for r in since] == ["r4", "r5"]
    assert await index.count_runs("s") == 6 and await index.count_runs("none") == 0


async def test_delete_and_clear(index: Any) -> None:
    for sid in ("s", "t"):
        await index.upsert_session(meta(sid))
        await index.upsert_run(sid, run(f"r-{sid}"))
    await index.delete_session("s")
    assert [r["session_id"] for r in await index.list_sessions("local")] == ["t"]
    assert await index.list_runs("s") == []
    await index.clear()
    assert await index.list_sessions("local") == []
    assert await index.runs_with_status("RUNNING") == []


async def test_open_twice_is_not_new(index: Any, tmp_path: Path) -> None:
    again = type(index)(index.url if index.path is None else index.path)
    assert await again.open() is False
    await again.close()


def _reindex(data_dir: Path, url: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "BRAID_DATABASE_URL"}
    if url:
        env["BRAID_DATABASE_URL"] = url
    out = subprocess.run([sys.executable, "-m", "server.cli", "reindex", "--data-dir",
                          str(data_dir)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("backend", BACKENDS)
async def test_braid_reindex_rebuilds_the_index_from_git_alone(
        backend: str, request: pytest.FixtureRequest, make_braid: Any, tmp_path: Path) -> None:
    from server.features import sessions

    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    data = tmp_path / "data"
    braid = await make_braid(data, database_url=url)
    sid, _ = await new_session(braid)
    first = await run_turn(braid, sid, "write a.txt one")
    second = await run_turn(braid, sid, "say two")
    other, _ = await new_session(braid)
    await run_turn(braid, other, "hello")
    before_sessions = await braid.index.list_sessions("local")
    before_runs = await braid.index.list_runs(sid)
    await braid.index.clear()  # the index lost: git still holds everything
    assert await braid.index.list_sessions("local") == []
    assert "reindexed 2 sessions, 3 runs" in _reindex(data, url)
    assert await braid.index.list_sessions("local") == before_sessions
    after_runs = await braid.index.list_runs(sid)
    assert after_runs == before_runs
    assert [r["run_id"] for r in after_runs] == [first["run_id"], second["run_id"]]
    listed = await sessions.list_sessions(braid, "local")
    assert {s["session_id"] for s in listed} == {sid, other}
