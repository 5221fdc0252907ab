"""Search over message text in PostgreSQL (a team server): the same rows and methods as
`store.search.SqliteSearch`, found through a generated `tsvector` column and its GIN index
(the `simple` configuration: words as written, case folded, no stemming, like FTS5's
unicode61). Derived from git too: `braid reindex` rebuilds it.

As in SQLite, each lexeme carries its owner's tag (`search.owner_tag`) and a query asks for
the caller's tagged lexemes: the GIN index hands back the caller's matches only, never walks
another user's (what a query costs tells nothing of other users' chats)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from server.base.results import SearchHit
from server.store.search import (
    TAG_CHARS,
    SearchRow,
    check_limit,
    is_prefix,
    owner_tag,
    query_words,
    snippet,
)

if TYPE_CHECKING:
    from server.backends.pg_index import PgIndex

# `braid_tagged`: a text's lexemes (as to_tsvector 'simple' makes them), each behind `tag`
# (one too long for a lexeme then is left out, as to_tsvector leaves out longer words).
# `braid_tagged_query`: a tsquery's lexemes behind `tag` (its text form quotes each one;
# the words hold letters and digits only, `query_words`, so no quote is inside one).
# The owner column holds the tag.
SCHEMA = r"""
CREATE OR REPLACE FUNCTION braid_tagged(tag text, body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array_to_tsvector(coalesce(array_agg(tag || l), '{}'))
    FROM unnest(tsvector_to_array(to_tsvector('simple'::regconfig, body))) AS l
    WHERE octet_length(tag || l) < 2048 $$;
CREATE OR REPLACE FUNCTION braid_tagged_query(tag text, q tsquery) RETURNS tsquery
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(q::text, '''([^'']*)''', '''' || tag || '\1''', 'g')::tsquery $$;
CREATE TABLE IF NOT EXISTS message_text (
    seq BIGSERIAL,
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    message_index INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (braid_tagged(owner, text)) STORED,
    PRIMARY KEY (session_id, run_id, message_index)
);
CREATE INDEX IF NOT EXISTS message_text_tsv ON message_text USING GIN (tsv);
CREATE INDEX IF NOT EXISTS message_text_seq ON message_text (seq);
"""
SCHEMA_LOCK = 0x6272616964 + 1  # the index's lock ("braid") + 1
# The owner: its session's user's tag (the session's row comes first), as `owner_tag`.
ADD_SQL = (
    "INSERT INTO message_text (owner, session_id, run_id, message_index, role, text) "
    "VALUES (coalesce((SELECT left(encode(sha256(convert_to(user_id, 'UTF8')), 'hex'), "
    f"{TAG_CHARS}) FROM sessions WHERE session_id = $1), ''), $1, $2, $3, $4, $5) "
    "ON CONFLICT (session_id, run_id, message_index) DO UPDATE "
    "SET role = EXCLUDED.role, text = EXCLUDED.text "
    "WHERE message_text.text <> EXCLUDED.text"
)
# The caller's newest `limit` matches (their snippets are made as in SQLite,
# `search.snippet`: ts_headline would drop what looks like an HTML tag from the text). The
# words as to_tsquery normalizes them, then tagged: the caller's lexemes only.
SEARCH_SQL = (
    "SELECT m.session_id, s.title, m.run_id, m.message_index, m.role, m.text"
    " FROM message_text m JOIN sessions s ON s.session_id = m.session_id"
    " WHERE m.tsv @@ braid_tagged_query($4, to_tsquery('simple', $1))"
    " AND s.user_id = $2 AND NOT s.archived ORDER BY m.seq DESC LIMIT $3"
)


def ts_query(words: list[str]) -> str:
    """to_tsquery text: every word quoted as a lexeme, all required, the last a prefix (of
    two characters or more, as `search.fts_query`). The words hold letters and digits only
    (`query_words`), so none is an operator."""
    quoted = [f"'{w}'" for w in words]
    if is_prefix(words[-1]):
        quoted[-1] += ":*"
    return " & ".join(quoted)


def search_args(user_id: str, words: list[str], limit: int) -> tuple[str | int, ...]:
    """SEARCH_SQL's parameters (the tests read its plan with them)."""
    return ts_query(words), user_id, check_limit(limit), owner_tag(user_id)


class PgSearch:
    """Each call takes a connection from the index's pool."""

    def __init__(self, index: PgIndex) -> None:
        self.index = index

    async def open(self) -> bool:
        """Create the table (after the index opened); True when it did not exist yet, or
        was made anew (an older one's lexemes carry no owner: start-up refills it)."""
        async with self.index.pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            fresh = not await db.fetchval(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'message_text' AND column_name = 'owner'")
            if fresh:  # none, or an older one whose lexemes carry no owner (refilled)
                await db.execute("DROP TABLE IF EXISTS message_text")
            await db.execute(SCHEMA)
        return bool(fresh)

    async def add(self, rows: list[SearchRow]) -> None:
        if rows:
            await self.index.pool.executemany(ADD_SQL, [tuple(r) for r in rows])

    async def copy_session(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's messages: one statement, however many."""
        await self.index.pool.execute(
            "INSERT INTO message_text (owner, session_id, run_id, message_index, role, text) "
            "SELECT owner, $1, run_id, message_index, role, text FROM message_text "
            "WHERE session_id = $2 ON CONFLICT DO NOTHING", to_session_id, from_session_id)

    async def delete_session(self, session_id: str) -> None:
        await self.index.pool.execute(
            "DELETE FROM message_text WHERE session_id = $1", session_id)

    async def delete_runs(self, session_id: str, run_ids: list[str]) -> None:
        """A removed branch's runs (a fork has its own copies)."""
        await self.index.pool.execute(
            "DELETE FROM message_text WHERE session_id = $1 AND run_id = ANY($2::text[])",
            session_id, run_ids)

    async def clear(self) -> None:
        await self.index.pool.execute("DELETE FROM message_text")

    async def search(self, user_id: str, query: str, limit: int) -> list[SearchHit]:
        words = query_words(query)
        if not words:
            return []
        rows = await self.index.pool.fetch(SEARCH_SQL, *search_args(user_id, words, limit))
        hits = []
        for r in rows:
            hit = dict(r)
            hit["snippet"] = snippet(hit.pop("text"), words)
            hits.append(hit)
        return cast(list[SearchHit], hits)
