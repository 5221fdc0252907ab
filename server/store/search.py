"""Search over message text (DESIGN §4 "Search and titles"): SQLite FTS5 in the index
database here, PostgreSQL full-text in `backends.pg_search` on a team server, both behind
`MessageSearch`.

One row per message worth finding: a user's or the assistant's text, keyed by (session,
run, index of the message in its run). Tool calls and results, system notes and a fork's
copies of its source's messages (`copied_from`: the source run has them) are left out. Like
the rest of the index it is derived from git: `braid reindex` rebuilds it (`branch_rows`).
A forked session shares its source's rows up to the fork (`message_shares`, one row a
fork) rather than copying them; deleting a source first gives its forks their own copies.
Hits are the caller's own sessions, archived ones left out (as the sidebar leaves them out),
newest first; the snippet marks each matched word `«word»`.

The index filters by user before it walks a match: each indexed word carries its owner's tag
(`owner_tag`, glued to the word's front) and a query asks for the caller's tagged words only.
The index never reads another user's matches, so how long a query takes tells nothing of how
often a word appears in other users' chats (issue 34: a filter after the match walked every
user's matches, 5.3 vs 8.3 ms).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from server.base.errors import BadRequest
from server.base.records import MessageRecord
from server.base.results import SearchHit
from server.store import layout

if TYPE_CHECKING:
    import pygit2

    from server.git.session import GitSession
    from server.store.index import Index

ROLES = ("user", "assistant")
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_QUERY = 1_000  # characters of a query
MAX_WORDS = 16
MARK_OPEN, MARK_CLOSE = "«", "»"
SNIPPET_WORDS = 16
PREFIX_FROM = 2  # a one-letter last word is a word, not every word that starts with it
# A word as FTS5's unicode61 tokenizer sees one: letters and digits (an underscore splits).
WORD = re.compile(r"[^\W_]+")
TAG_CHARS = 12  # hex digits of a user's tag


class SearchRow(NamedTuple):
    session_id: str
    run_id: str
    message_index: int
    role: str
    text: str


def run_rows(session_id: str, run_id: str, messages: list[MessageRecord]) -> list[SearchRow]:
    """The rows of a run's messages (`messages`: the run's own, in order; its index counts
    every message of the run, as `message_index` does elsewhere)."""
    return [SearchRow(session_id, run_id, i, m["role"], m.get("content") or "")
            for i, m in enumerate(messages)
            if m.get("role") in ROLES and (m.get("content") or "").strip()
            and not m.get("copied_from")]


def branch_rows(session_id: str, messages: Sequence[MessageRecord]) -> list[SearchRow]:
    """The rows of a branch's messages (oldest first): each numbered within its run."""
    by_run: dict[str, list[MessageRecord]] = {}
    for m in messages:
        if m.get("run_id"):
            by_run.setdefault(str(m["run_id"]), []).append(m)
    return [row for run_id, msgs in by_run.items() for row in run_rows(session_id, run_id, msgs)]


def session_rows(git: GitSession, session_id: str) -> list[SearchRow]:
    """On the session thread: every branch's rows, once each (`braid reindex`)."""
    seen: dict[tuple[str, int], SearchRow] = {}
    for tip in git.branches().values():
        commit: pygit2.Commit = git.commit(tip)
        for row in branch_rows(session_id, layout.messages(git, commit)):
            seen.setdefault((row.run_id, row.message_index), row)
    return list(seen.values())


def run_rows_on_head(git: GitSession, session_id: str, run_id: str) -> list[SearchRow]:
    """On the session thread: a run's rows as HEAD's branch holds them (a recovered run)."""
    if git.repo.head_is_unborn:
        return []
    msgs = [m for m in layout.messages(git) if m.get("run_id") == run_id]
    return run_rows(session_id, run_id, msgs)


def query_words(query: str) -> list[str]:
    """The words of a user's query, any syntax characters dropped (never an error)."""
    if len(query) > MAX_QUERY:
        raise BadRequest(f"q is longer than {MAX_QUERY} characters")
    return WORD.findall(query)[:MAX_WORDS]


def owner_tag(user_id: str) -> str:
    """What goes in front of each of a user's words in the index: hex digits (letters and
    digits, so a tagged word stays one word to FTS5 and PostgreSQL), of a fixed length (so
    no tag starts another's words)."""
    return hashlib.sha256(user_id.encode()).hexdigest()[:TAG_CHARS]


def tagged_terms(user_id: str | None, text: str | None) -> str:
    """The text FTS5 indexes for a message of `user_id`: its words, each tagged. The
    triggers call it (as `braid_terms`) when a row goes in and again when it goes out, with
    the row's own owner and text: the same words both times."""
    tag = owner_tag(user_id or "")
    return " ".join(tag + w for w in WORD.findall(text or ""))


def fts_query(user_id: str, words: list[str]) -> str:
    """FTS5 MATCH text: every word tagged with the caller's tag and quoted (so none is an
    operator), all required, the last one a prefix (results while typing) when it has
    PREFIX_FROM characters or more. A prefix reads the terms from the caller's tag + prefix
    on: the caller's words only."""
    tag = owner_tag(user_id)
    quoted = [f'"{tag}{w}"' for w in words]
    if is_prefix(words[-1]):
        quoted[-1] += "*"
    return " ".join(quoted)


def is_prefix(word: str) -> bool:
    return len(word) >= PREFIX_FROM


def snippet(text: str, words: list[str]) -> str:
    """About SNIPPET_WORDS words of `text` from the first match on, each matched word marked
    (a word equal to one of `words`, or starting with the last: as the query matches)."""
    folded = [w.casefold() for w in words]

    def hit(token: str) -> bool:
        t = token.casefold()
        return t in folded or (is_prefix(folded[-1]) and t.startswith(folded[-1]))

    tokens = list(WORD.finditer(text))
    first = next((i for i, t in enumerate(tokens) if hit(t.group())), 0)
    start = max(0, first - SNIPPET_WORDS // 4)
    shown = tokens[start:start + SNIPPET_WORDS]
    if not shown:
        return text[:200]
    begin = 0 if start == 0 else shown[0].start()
    end = len(text) if start + SNIPPET_WORDS >= len(tokens) else shown[-1].end()
    out, at = [], begin
    for t in shown:
        if hit(t.group()):
            out += [text[at:t.start()], MARK_OPEN, t.group(), MARK_CLOSE]
            at = t.end()
    out.append(text[at:end])
    return ("…" if begin else "") + "".join(out) + ("…" if end < len(text) else "")


def check_limit(limit: int) -> int:
    if limit < 1:
        raise BadRequest("limit must be a positive number")
    return min(limit, MAX_LIMIT)


class MessageSearch(Protocol):
    """What the layers above ask of the search index: `SqliteSearch`, or
    `backends.pg_search.PgSearch` on a team server (the same methods)."""

    async def open(self) -> bool: ...
    async def add(self, rows: list[SearchRow]) -> None: ...
    async def copy_session(self, from_session_id: str, to_session_id: str) -> None: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def delete_runs(self, session_id: str, run_ids: list[str]) -> None: ...
    async def clear(self) -> None: ...
    async def search(self, user_id: str, query: str, limit: int) -> list[SearchHit]: ...


SCHEMA = """
CREATE TABLE IF NOT EXISTS message_text (
    id INTEGER PRIMARY KEY,
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    message_index INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (session_id, run_id, message_index)
);
-- Contentless: the index of the tagged words (`tagged_terms`), the text stays in message_text.
CREATE VIRTUAL TABLE IF NOT EXISTS message_fts USING fts5(
    terms, content='', tokenize='unicode61');
CREATE TRIGGER IF NOT EXISTS message_text_ai AFTER INSERT ON message_text BEGIN
    INSERT INTO message_fts(rowid, terms) VALUES (new.id, braid_terms(new.owner, new.text));
END;
CREATE TRIGGER IF NOT EXISTS message_text_ad AFTER DELETE ON message_text BEGIN
    INSERT INTO message_fts(message_fts, rowid, terms)
    VALUES ('delete', old.id, braid_terms(old.owner, old.text));
END;
CREATE TRIGGER IF NOT EXISTS message_text_au AFTER UPDATE ON message_text BEGIN
    INSERT INTO message_fts(message_fts, rowid, terms)
    VALUES ('delete', old.id, braid_terms(old.owner, old.text));
    INSERT INTO message_fts(rowid, terms) VALUES (new.id, braid_terms(new.owner, new.text));
END;
-- A forked session holds its source's rows up to the fork (`upto`: the newest row then),
-- shared rather than copied: a fork costs one row here, not a row and its words per message.
CREATE TABLE IF NOT EXISTS message_shares (
    session_id TEXT NOT NULL,
    source_id TEXT NOT NULL,
    upto INTEGER NOT NULL,
    PRIMARY KEY (session_id, source_id)
);
CREATE INDEX IF NOT EXISTS message_shares_by_source ON message_shares(source_id);
"""
# A message already indexed with the same text is left alone (a resumed run's earlier ones).
# Its owner is its session's user (the session's row comes first: created, or reindexed).
ADD_SQL = (
    "INSERT INTO message_text (owner, session_id, run_id, message_index, role, text) "
    "VALUES (coalesce((SELECT user_id FROM sessions WHERE session_id = ?1), ''), "
    "?1, ?2, ?3, ?4, ?5) ON CONFLICT (session_id, run_id, message_index) DO UPDATE "
    "SET role = excluded.role, text = excluded.text WHERE text != excluded.text"
)
# Newest first: FTS5 walks its matches by rowid, so the first `limit` of the caller's end it.
# A session's own rows, then the rows it shares with the sessions it was forked from.
# The words matched are the caller's (tagged); the joins then leave out their archived
# sessions. The snippet is made here (`snippet`): FTS5's would show the tags.
_HIT = ("SELECT {sid} AS session_id, s.title, m.run_id, m.message_index, m.role, m.text, "
        "m.id AS row_id FROM message_fts JOIN message_text m ON m.id = message_fts.rowid ")
SEARCH_SQL = (
    _HIT.format(sid="m.session_id") + "JOIN sessions s ON s.session_id = m.session_id "
    "WHERE message_fts MATCH ? AND s.user_id = ? AND s.archived = 0 UNION ALL "
    + _HIT.format(sid="h.session_id") + "JOIN message_shares h ON h.source_id = m.session_id "
    "AND m.id <= h.upto JOIN sessions s ON s.session_id = h.session_id "
    "WHERE message_fts MATCH ? AND s.user_id = ? AND s.archived = 0 "
    "ORDER BY row_id DESC LIMIT ?"
)
# Before a session's rows go, the forks sharing them get their own copies (a delete is rare,
# a fork is not).
UNSHARE_SQL = (
    "INSERT OR IGNORE INTO message_text (owner, session_id, run_id, message_index, role, "
    "text) SELECT m.owner, h.session_id, m.run_id, m.message_index, m.role, m.text "
    "FROM message_shares h "
    "JOIN message_text m ON m.session_id = h.source_id AND m.id <= h.upto "
    "WHERE h.source_id = ? ORDER BY m.id"
)


class SqliteSearch:
    """FTS5 over the `message_text` table, in the index's own SQLite file and connection."""

    def __init__(self, index: Index) -> None:
        self.index = index

    async def open(self) -> bool:
        """Create the tables (after the index opened); True when they did not exist yet, or
        were made anew (an older index's, whose words carry no owner: rebuilt from git)."""
        async with self.index.use() as db:
            await db.create_function("braid_terms", 2, tagged_terms, deterministic=True)
            async with db.execute("PRAGMA table_info(message_text)") as cur:
                columns = {r[1] for r in await cur.fetchall()}
            fresh = "owner" not in columns
            if columns and fresh:
                await db.executescript(
                    "DROP TABLE IF EXISTS message_fts; DROP TABLE message_text; "
                    "DROP TABLE IF EXISTS message_shares;")
            await db.executescript(SCHEMA)
            await db.commit()
        return fresh

    async def add(self, rows: list[SearchRow]) -> None:
        if not rows:
            return
        async with self.index.use() as db:
            await db.executemany(ADD_SQL, rows)
            await db.commit()

    async def copy_session(self, from_session_id: str, to_session_id: str) -> None:
        """A forked session shares its source's rows as they are now, and what its source
        shares: a row per session it descends from, however many messages (issue 30: a
        copy re-indexed every word of the source, O(session) in each fork)."""
        async with self.index.use() as db:
            async with db.execute("SELECT coalesce(max(id), 0) FROM message_text") as cur:
                row = await cur.fetchone()
            upto = int(row[0]) if row is not None else 0
            await db.execute("INSERT OR REPLACE INTO message_shares (session_id, source_id, "
                             "upto) VALUES (?, ?, ?)", (to_session_id, from_session_id, upto))
            await db.execute(
                "INSERT OR REPLACE INTO message_shares (session_id, source_id, upto) "
                "SELECT ?, source_id, min(upto, ?) FROM message_shares WHERE session_id = ?",
                (to_session_id, upto, from_session_id))
            await db.commit()

    async def delete_session(self, session_id: str) -> None:
        await self.index.change(
            (UNSHARE_SQL, (session_id,)),
            ("DELETE FROM message_shares WHERE source_id = ? OR session_id = ?",
             (session_id, session_id)),
            ("DELETE FROM message_text WHERE session_id = ?", (session_id,)))

    async def delete_runs(self, session_id: str, run_ids: list[str]) -> None:
        """A removed branch's runs (their forks keep their own copies, as `delete_session`
        gives them)."""
        if not run_ids:
            return
        marks = ", ".join("?" for _ in run_ids)
        await self.index.change(
            (UNSHARE_SQL.replace("ORDER BY", f"AND m.run_id IN ({marks}) ORDER BY"),
             (session_id, *run_ids)),
            (f"DELETE FROM message_text WHERE session_id = ? AND run_id IN ({marks})",
             (session_id, *run_ids)))

    async def clear(self) -> None:
        await self.index.change(("DELETE FROM message_shares", ()),
                                ("DELETE FROM message_text", ()))

    async def search(self, user_id: str, query: str, limit: int) -> list[SearchHit]:
        words = query_words(query)
        if not words:
            return []
        rows = await self.index.rows(*search_statement(user_id, words, limit))
        for r in rows:
            del r["row_id"]
            r["snippet"] = snippet(r.pop("text"), words)
        return cast(list[SearchHit], rows)


def search_statement(user_id: str, words: list[str],
                     limit: int) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and its parameters for the caller's matches (what `SqliteSearch.search` runs;
    the tests count the work it does)."""
    match = fts_query(user_id, words)
    return SEARCH_SQL, (match, user_id, match, user_id, check_limit(limit))
