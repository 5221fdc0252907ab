"""Which storage a Braid uses: the embedded SQLite files in the data dir (the default), or
PostgreSQL when BRAID_DATABASE_URL is a postgresql:// URL, with the in-process bus and
branch registry replaced by their cross-process versions (pg_team.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.agent.live_runs import RunRegistry
from server.base.events import EventBus
from server.base.ids import new_message_id
from server.store.index import Index
from server.store.locks import BranchLocks, LocalBranchLocks
from server.store.queue import MessageQueue, SqliteQueue
from server.store.search import MessageSearch, SqliteSearch
from server.store.users import Users, UserStore

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.backends.pg_index import PgIndex
    from server.backends.pg_team import Team
    from server.base.settings import Settings


def make_index(settings: Settings) -> Index | PgIndex:
    if settings.database_url:
        from server.backends.pg_index import PgIndex

        return PgIndex(settings.database_url)
    return Index(settings.data_dir / "index.sqlite3")


def make_queue(index: Index | PgIndex, team: Team | None) -> MessageQueue:
    """The message queue in the index's database: its SQLite file, or PostgreSQL (whose
    claims carry the team's name of this process)."""
    if team is not None:
        from server.backends.pg_index import PgIndex
        from server.backends.pg_queue import PgQueue

        assert isinstance(index, PgIndex)
        return PgQueue(index, team.owner_id)
    assert isinstance(index, Index)
    return SqliteQueue(index, f"local-{new_message_id()[:12]}")


def make_search(index: Index | PgIndex) -> MessageSearch:
    """Search over message text in the index's own database (store/search.py)."""
    if isinstance(index, Index):
        return SqliteSearch(index)
    from server.backends.pg_search import PgSearch

    return PgSearch(index)


def make_users(settings: Settings) -> UserStore:
    if settings.database_url:
        from server.backends.pg_users import PgUsers

        return PgUsers(settings.database_url)
    return Users(settings.data_dir / "users.sqlite3")


def make_team(braid: Services, settings: Settings
              ) -> tuple[Team | None, EventBus, RunRegistry, BranchLocks]:
    """(team, bus, runs, branch locks): no team for one process; else the team's."""
    if not settings.database_url:
        return None, EventBus(), RunRegistry(), LocalBranchLocks()
    from server.backends.pg_team import Team

    team = Team(braid, settings.database_url)
    return team, team.bus, team.runs, team.branch_locks
