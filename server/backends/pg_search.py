"""Search over message text in PostgreSQL (a team server): the same rows and methods as
`store.search.SqliteSearch`, found through a generated `tsvector` column and its GIN index
(the `simple` configuration: words as written, case folded, no stemming, like FTS5's
unicode61). Derived from git too: `braid reindex` rebuilds it."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from server.base.results import SearchHit
from server.store.search import SearchRow, check_limit, is_prefix, query_words, snippet

if TYPE_CHECKING:
    from server.backends.pg_index import PgIndex

SCHEMA = """
CREATE TABLE IF NOT EXISTS message_text (
    seq BIGSERIAL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    message_index INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    PRIMARY KEY (session_id, run_id, message_index)
);
CREATE INDEX IF NOT EXISTS message_text_tsv ON message_text USING GIN (tsv);
CREATE INDEX IF NOT EXISTS message_text_seq ON message_text (seq);
"""
SCHEMA_LOCK = 0x6272616964 + 1  # the index's lock ("braid") + 1
ADD_SQL = (
    "INSERT INTO message_text (session_id, run_id, message_index, role, text) "
    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id, run_id, message_index) DO UPDATE "
    "SET role = EXCLUDED.role, text = EXCLUDED.text "
    "WHERE message_text.text <> EXCLUDED.text"
)
# The caller's newest `limit` matches (their snippets are made as FTS5 makes them,
# `search.snippet`: ts_headline would drop what looks like an HTML tag from the text).
SEARCH_SQL = (
    "SELECT m.session_id, s.title, m.run_id, m.message_index, m.role, m.text"
    " FROM message_text m JOIN sessions s ON s.session_id = m.session_id"
    " WHERE m.tsv @@ to_tsquery('simple', $1) AND s.user_id = $2 AND NOT s.archived"
    " ORDER BY m.seq DESC LIMIT $3"
)


def ts_query(words: list[str]) -> str:
    """to_tsquery text: every word quoted as a lexeme, all required, the last a prefix (of
    two characters or more, as `search.fts_query`). The words hold letters and digits only
    (`query_words`), so none is an operator."""
    quoted = [f"'{w}'" for w in words]
    if is_prefix(words[-1]):
        quoted[-1] += ":*"
    return " & ".join(quoted)


class PgSearch:
    """Each call takes a connection from the index's pool."""

    def __init__(self, index: PgIndex) -> None:
        self.index = index

    async def open(self) -> bool:
        """Create the table (after the index opened); True when it did not exist yet."""
        async with self.index.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            fresh = await db.fetchval("SELECT to_regclass('message_text') IS NULL")
            await db.execute(SCHEMA)
        return bool(fresh)

    async def add(self, rows: list[SearchRow]) -> None:
        if rows:
            await self.index.pool.executemany(ADD_SQL, [tuple(r) for r in rows])

    async def copy_session(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's messages: one statement, however many."""
        await self.index.pool.execute(
            "INSERT INTO message_text (session_id, run_id, message_index, role, text) "
            "SELECT $1, run_id, message_index, role, text FROM message_text "
            "WHERE session_id = $2 ON CONFLICT DO NOTHING", to_session_id, from_session_id)

    async def delete_session(self, session_id: str) -> None:
        await self.index.pool.execute(
            "DELETE FROM message_text WHERE session_id = $1", session_id)

    async def clear(self) -> None:
        await self.index.pool.execute("DELETE FROM message_text")

    async def search(self, user_id: str, query: str, limit: int) -> list[SearchHit]:
        words = query_words(query)
        if not words:
            return []
        rows = await self.index.pool.fetch(
            SEARCH_SQL, ts_query(words), user_id, check_limit(limit))
        hits = []
        for r in rows:
            hit = dict(r)
            hit["snippet"] = snippet(hit.pop("text"), words)
            hits.append(hit)
        return cast(list[SearchHit], hits)
