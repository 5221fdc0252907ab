"""Per-user roots on a team server (issue 21 row 2): kept in PostgreSQL's users table (a
table made before them gets the column), granted with `braid user add NAME --roots`, and
checked for the caller on every import and export."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from conftest import ROOT, Server, free_port
from server.store.users import hash_token


def old_schema(url: str, token: str) -> None:
    """The users table as it was before roots, with one user in it."""
    async def make() -> None:
        db = await asyncpg.connect(url)
        try:
            await db.execute("CREATE TABLE users (user_id TEXT PRIMARY KEY, token_hash TEXT "
                             "NOT NULL UNIQUE, created_at TEXT NOT NULL)")
            await db.execute("INSERT INTO users VALUES ('old', $1, 'then')", hash_token(token))
        finally:
            await db.close()

    asyncio.run(make())


def test_roots_per_user_in_postgresql(tmp_path: Path, pg_url: str) -> None:
    old_schema(pg_url, "old-token-0123456789")
    roots, his = tmp_path / "roots", tmp_path / "bob"
    for folder in (roots / "p", his / "q"):
        folder.mkdir(parents=True)
        (folder / "f.txt").write_text("x\n")
    srv = Server(data_dir=tmp_path / "data", port=free_port(),
                 env={"BRAID_DATABASE_URL": pg_url, "BRAID_IMPORT_ROOTS": str(roots)}).start()
    try:
        env: dict[str, Any] = {**os.environ, "BRAID_DATABASE_URL": pg_url}
        out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", "bob",
                              "--roots", str(his), "--data-dir", str(srv.data_dir)],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        bob = out.stdout.strip().splitlines()[-1]
        for token, where, code in [(bob, his / "q", 201), (bob, roots / "p", 403),
                                   (None, roots / "p", 201), (None, his / "q", 403),
                                   ("old-token-0123456789", roots / "p", 403)]:
            status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(where)}},
                                   token=token)
            assert status == code, (where, body)
    finally:
        srv.stop()
