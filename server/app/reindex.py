"""The index rebuilt from the repositories alone (`braid reindex`; a new index at start-up).

The index is a cache: every session's `session.json` and every run record on every branch
(plus a RUNNING record a killed turn left on disk only) is all it holds.
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING

from server.base.records import RunRecord, SessionMeta
from server.git.history import RUNS
from server.git.session import GitSession
from server.store import layout, session_settings
from server.store.search import session_rows

if TYPE_CHECKING:
    from server.agent.services import Services


def read_session(git: GitSession) -> tuple[SessionMeta, list[RunRecord]]:
    """session.json and every run record on every branch (a sibling run lives on its own
    branch; the record on the run's own branch wins)."""
    meta: SessionMeta = session_settings.overlay(
        git.read_json(git.head_commit(), "session.json"), git.path)
    runs: dict[str, RunRecord] = {}
    for name, tip in git.branches().items():
        commit = git.commit(tip)
        for run in layout.runs(git, commit):
            known = runs.get(run["run_id"])
            if known is None or run.get("branch") == name:
                runs[run["run_id"]] = run.copy()
    # A turn killed before its first checkpoint left its RUNNING record on disk only: listed
    # so that start-up recovery commits it as INTERRUPTED even when the index was lost too.
    for rel in sorted(git.pending.paths()):  # pending records, either layout (staging.py)
        if not rel.startswith(f"{RUNS}/") or rel.rsplit("/", 1)[-1][:-5] in runs:
            continue
        try:
            run = json.loads(git.pending.read(rel) or b"")
        except ValueError:
            continue
        if isinstance(run, dict) and run.get("status") == "RUNNING" and run.get("run_id"):
            runs[str(run["run_id"])] = run
    return meta, list(runs.values())


async def reindex(braid: Services) -> tuple[int, int]:
    """Rebuild the index (index.sqlite3, or PostgreSQL's) from the repositories alone."""
    await braid.index.clear()
    await braid.search.clear()
    n_sessions = n_runs = 0
    for session_id in braid.store.all_ids():
        handle = braid.store.get(session_id)
        meta, runs = await handle.call(read_session)
        updated = max([r.get("updated_at") or r["created_at"] for r in runs] or
                      [meta["created_at"]])
        await braid.index.upsert_session(meta, updated)
        for run in runs:
            await braid.index.upsert_run(session_id, run)
        await braid.search.add(await handle.call(partial(session_rows, session_id=session_id)))
        n_sessions += 1
        n_runs += len(runs)
    return n_sessions, n_runs


async def reindex_one(braid: Services, session_id: str) -> None:
    handle = braid.store.get(session_id)
    meta, runs = await handle.call(read_session)
    await braid.index.upsert_session(meta)
    for run in runs:
        await braid.index.upsert_run(session_id, run)
    await braid.search.delete_session(session_id)
    await braid.search.add(await handle.call(lambda git: session_rows(git, session_id)))
