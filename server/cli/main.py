"""`braid serve | reindex | user add NAME | open PATH | export SESSION | settings` (DESIGN §7)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from server.base.settings import Settings


def _settings(args: argparse.Namespace) -> Settings:
    settings = _from_env()
    if getattr(args, "data_dir", None):
        settings.data_dir = Path(args.data_dir).expanduser()
    if getattr(args, "host", None):
        settings.host = args.host
    if getattr(args, "port", None):
        settings.port = args.port
    return settings


def _from_env() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as e:  # a setting that does not parse: its sentence, no traceback
        raise SystemExit(f"braid: {e}") from e


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from server.app.gc_tuning import tune_for_serving
    from server.app.memory import keep_allocator_to_self
    from server.web.app import create_app
    from server.web.ws import WS_MAX_SIZE

    keep_allocator_to_self()  # scripts/run's PYTHONMALLOC is not the shell tool's (memory.py)
    settings = _settings(args)
    tune_for_serving()  # the app's code is imported: freeze it, and collect less often
    if settings.token:
        print(f"Braid is running. Open: http://{settings.host}:{settings.port}/login?token="
              f"{settings.token}", flush=True)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level="warning", ws_max_size=WS_MAX_SIZE)
    return 0


def reindex(args: argparse.Namespace) -> int:
    from server.app.braid import Braid
    from server.app.reindex import reindex as rebuild

    async def run() -> tuple[int, int]:
        braid = Braid(_settings(args))
        await braid.index.open()
        await braid.search.open()  # message text, in the index's database
        try:
            return await rebuild(braid)
        finally:
            await braid.index.close()
            braid.users.close()
            if braid.team is not None:
                braid.team.locks.close()
            braid.store.close()

    sessions, runs = asyncio.run(run())
    print(f"reindexed {sessions} sessions, {runs} runs")
    return 0


def user_add(args: argparse.Namespace) -> int:
    """Create a user (or replace its token) and print the token; `--roots A:B` sets the
    folders it may import from and export to (kept as they were without it; "" for none)."""
    from server.backends.choose import make_users
    from server.base.errors import BadRequest
    from server.store.users import DEFAULT_USER, check_roots

    settings = _settings(args)
    try:
        roots = None if args.roots is None else check_roots(args.roots)
    except BadRequest as e:
        raise SystemExit(f"braid: {e.message}") from e
    if roots is not None and args.name == DEFAULT_USER:
        raise SystemExit(f"braid: {DEFAULT_USER}'s roots are BRAID_IMPORT_ROOTS")
    users = make_users(settings)  # users.sqlite3, or PostgreSQL's with BRAID_DATABASE_URL
    try:
        if users.exists(args.name):
            print(f"user {args.name} exists; its token is replaced", file=sys.stderr)
        token = users.set_token(args.name)
        if roots is not None:
            users.set_roots(args.name, roots)
        given = [str(p) for p in settings.import_roots] if args.name == DEFAULT_USER \
            else users.roots(args.name)
        print(f"{args.name}'s roots: {', '.join(given) or 'none'}", file=sys.stderr)
        print(token)
    finally:
        users.close()
    return 0


def show_settings(args: argparse.Namespace) -> int:
    """Every setting (settings.py's table): variable, kind, default, help, and the value this
    environment gives it when that is not the default."""
    from server.base.settings import table

    current = _from_env()
    defaults = Settings()
    rows = table()
    width = max(len(r.variable) for r in rows)
    for r in rows:
        value = getattr(current, r.attribute)
        now = "" if value == getattr(defaults, r.attribute) or r.secret \
            else f"  [now: {value}]"
        later = " (not yet used)" if r.later else ""
        print(f"{r.variable:<{width}}  {r.kind}, default {r.default}: {r.help}{later}{now}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="braid", description="Braid: git-backed agent chat")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start the web app")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir")
    p.set_defaults(fn=serve)
    p = sub.add_parser("reindex", help="rebuild the index (SQLite, or PostgreSQL with "
                       "BRAID_DATABASE_URL) from the session repositories")
    p.add_argument("--data-dir")
    p.set_defaults(fn=reindex)
    p = sub.add_parser("user", help="manage users")
    user_sub = p.add_subparsers(dest="user_command", required=True)
    q = user_sub.add_parser("add", help="create a user (or replace its token) and print it")
    q.add_argument("name")
    q.add_argument("--roots", help="folders (separated by ':') the user may import from and "
                   "export to; without it a new user has none")
    q.add_argument("--data-dir")
    q.set_defaults(fn=user_add)
    p = sub.add_parser("settings", help="print every BRAID_* setting: kind, default, help")
    p.set_defaults(fn=show_settings)
    from server.cli.project import add_commands

    add_commands(sub, _settings)  # braid open PATH, braid export SESSION --to PATH
    args = parser.parse_args(argv)
    return int(args.fn(args))
