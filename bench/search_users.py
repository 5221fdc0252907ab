"""Search and other users' chats (issue 34): what a user's query costs when another user's
chats hold the word never, or 50,000 times. With the filter after the match (main before
issue 34) the second is slower: a query's time told how often a word appears in other users'
chats. With the owner's tag on each indexed word the two are the same.

Both users' sessions are in one SQLite index (as `braid serve` keeps them); the caller has
200 messages holding the word; the other user 0 or 50,000. Medians of the caller's query
(`SqliteSearch.search`, limit 20), the two cases interleaved.

Run: .venv/bin/python bench/search_users.py   (BENCH_SAMPLES, default 201)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.store.index import Index  # noqa: E402
from server.store.search import SearchRow, SqliteSearch  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "201"))
THEIRS = 50_000


async def index_with(path: Path, theirs: int) -> tuple[Index, SqliteSearch]:
    index = Index(path)
    await index.open()
    search = SqliteSearch(index)
    await search.open()
    for sid, user in (("mine", "ann"), ("theirs", "bea")):
        await index.upsert_session({"session_id": sid, "user_id": user, "title": sid,
                                    "created_at": "2026-01-01T00:00:00Z",
                                    "forked_from_session_id": None, "root_session_id": sid})
    await search.add([SearchRow("mine", f"r{i}", 0, "user", f"the zebra number {i}")
                      for i in range(200)])
    await search.add([SearchRow("theirs", f"q{i}", 0, "user", f"a zebra of theirs {i}")
                      for i in range(theirs)])
    # Their other words: the same index size either way.
    await search.add([SearchRow("theirs", f"p{i}", 0, "user", f"a horse of theirs {i}")
                      for i in range(THEIRS - theirs)])
    return index, search


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="braid-search-users-") as tmp:
        cases = {n: await index_with(Path(tmp) / f"i{n}.sqlite3", n) for n in (0, THEIRS)}
        times: dict[int, list[float]] = {n: [] for n in cases}
        for i in range(SAMPLES + 10):
            for n, (_, search) in cases.items():
                t0 = time.perf_counter()
                hits = await search.search("ann", "zebra", 20)
                if i >= 10:
                    times[n].append((time.perf_counter() - t0) * 1000)
                assert len(hits) == 20
        for index, _ in cases.values():
            await index.close()
    a, b = statistics.median(times[0]), statistics.median(times[THEIRS])
    print(f"Search: the caller's query (200 of their messages hold the word), median of "
          f"{SAMPLES}, ms")
    print(f"   other user's messages holding it: {0:>7} {THEIRS:>7}   ratio")
    print(f"   {'':<34}{a:7.2f} {b:7.2f}   {b / a:5.2f}")


if __name__ == "__main__":
    asyncio.run(main())
