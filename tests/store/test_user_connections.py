"""A user's own connections in the users backend (store/users.py; backends/pg_users.py):
kept per user, replaced by name, removed; the SQLite file is the server user's alone (it
holds the keys), and PostgreSQL keeps the same records."""

from __future__ import annotations

import stat
from pathlib import Path

from server.backends.pg_users import PgUsers
from server.base.records import ConnectionRecord
from server.store.users import Users, UserStore


def record(kind: str, name: str, url: str, secret: dict[str, str],
           models: list[str] | None = None) -> ConnectionRecord:
    return {"kind": kind, "name": name, "url": url, "secret": secret, "models": models or [],
            "created_at": "2026-01-01T00:00:00Z"}


def check_backend(users: UserStore) -> None:
    users.set_token("ann")
    users.set_token("bob")
    mine = record("model", "mine", "https://a.example/v1", {"api_key": "sk-ann"}, ["m1", "m2"])
    users.put_connection("ann", mine)
    users.put_connection("ann", record("mcp", "docs", "https://d.example/mcp",
                                       {"Authorization": "Bearer t"}))
    users.put_connection("bob", record("model", "mine", "https://b.example/v1", {}))
    assert users.connections("ann") == [mine, record(
        "mcp", "docs", "https://d.example/mcp", {"Authorization": "Bearer t"})]
    assert [r["url"] for r in users.connections("bob")] == ["https://b.example/v1"]
    # The same kind and name again replaces it.
    users.put_connection("ann", record("model", "mine", "https://c.example/v1", {}, ["x"]))
    assert [(r["url"], r["models"], r["secret"]) for r in users.connections("ann")
            if r["kind"] == "model"] == [("https://c.example/v1", ["x"], {})]
    # Removing is the user's own: bob's "mine" stays when ann removes hers.
    assert users.remove_connection("ann", "model", "mine")
    assert not users.remove_connection("ann", "model", "mine")
    assert not users.remove_connection("ann", "mcp", "nope")
    assert [r["name"] for r in users.connections("ann")] == ["docs"]
    assert [r["name"] for r in users.connections("bob")] == ["mine"]
    assert users.connections("nobody") == []


def test_connections_per_user_in_sqlite_in_a_file_of_the_servers_user_alone(
        tmp_path: Path) -> None:
    path = tmp_path / "users.sqlite3"
    check_backend(Users(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # A file made before (0644) is made the server user's alone when opened.
    old = tmp_path / "old.sqlite3"
    Users(old)
    old.chmod(0o644)
    Users(old)
    assert stat.S_IMODE(old.stat().st_mode) == 0o600


def test_connections_per_user_in_postgresql(pg_url: str) -> None:
    users = PgUsers(pg_url)
    try:
        check_backend(users)
    finally:
        users.close()
