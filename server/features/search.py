"""Search: the caller's messages by words (DESIGN §4 "Search and titles",
`GET /api/search?q=&limit=`). The words are found by the index's `MessageSearch`
(store/search.py: FTS5, or PostgreSQL full-text); a query with no word in it (empty, or only
punctuation and operators) finds nothing rather than failing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.base.results import SearchResults
from server.store.search import DEFAULT_LIMIT

if TYPE_CHECKING:
    from server.agent.services import Services


async def search(braid: Services, user_id: str, query: str,
                 limit: int = DEFAULT_LIMIT) -> SearchResults:
    """The caller's messages holding every word of `query` (the last one as a prefix),
    newest first, at most `limit` (1 to 100; more is taken as 100)."""
    return {"results": await braid.search.search(user_id, query, limit)}
