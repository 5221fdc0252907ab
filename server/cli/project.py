"""`braid open PATH` and `braid export SESSION --to PATH|branch` (issue 13): a session from
the user's own project, opened in the browser the way `jupyter notebook` does, and its work
taken back out. Both go through the data dir's running server when there is one (starting
one for `open`), so only one process ever writes the sessions."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path
from typing import Any

from server.app import runinfo
from server.app.runinfo import RunInfo
from server.base.settings import Settings

START_TIMEOUT = 30.0


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_server(settings: Settings) -> RunInfo:
    """Start `braid serve` for the data dir in the background (its own session, so it
    outlives this command) and wait until it answers."""
    port = settings.port if _port_free(settings.host, settings.port) else \
        _free_port(settings.host)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = open(settings.data_dir / "server.log", "ab")  # noqa: SIM115 - the server's now
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--host", settings.host, "--port",
         str(port), "--data-dir", str(settings.data_dir)],
        cwd=Path(__file__).resolve().parent.parent, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"braid: the server exited; see {settings.data_dir / 'server.log'}")
        info = runinfo.running(settings.data_dir)
        if info is not None:
            return info
        time.sleep(0.1)
    raise SystemExit("braid: the server did not answer in time")


def token_for(settings: Settings) -> str:
    if settings.token:
        return settings.token
    path = settings.data_dir / "token"
    try:
        return path.read_text().strip()
    except OSError as e:
        raise SystemExit(f"braid: no token: set BRAID_TOKEN or start the server ({e})") from e


def call(base_url: str, token: str, method: str, path: str, body: Any) -> Any:
    req = urllib.request.Request(f"{base_url}{path}", data=json.dumps(body).encode(),
                                 method=method, headers={"Authorization": f"Bearer {token}",
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as res:
            return json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            error = json.loads(e.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            error = str(e)
        raise SystemExit(f"braid: {error}") from e


def open_project(settings: Settings, args: argparse.Namespace) -> int:
    info = runinfo.running(settings.data_dir) or start_server(settings)
    token = token_for(settings)
    where = str(Path(args.path).expanduser().absolute())
    source: dict[str, Any] = {"git": where, "ref": args.ref} if args.ref or args.git \
        else {"path": where}
    created = call(info["base_url"], token, "POST", "/api/sessions",
                   {"source": source, **({"title": args.title} if args.title else {})})
    session_id = created["session_id"]
    query = urllib.parse.urlencode({"token": token, "next": f"/s/{session_id}"})
    url = f"{info['base_url']}/login?{query}"
    skipped = (created.get("import") or {}).get("skipped") or []
    print(f"Imported {(created.get('import') or {}).get('files', 0)} files into session "
          f"{session_id}")
    for item in skipped:
        print(f"  skipped {item['path']} ({item['reason']}, {item.get('size', 0)} bytes)")
    print(f"Open: {url}", flush=True)
    if not (args.no_browser or settings.no_browser):
        webbrowser.open(url)
    return 0


def export(settings: Settings, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"force": bool(args.force)}
    if args.to == "branch":
        params["to"] = "branch"
    else:
        params.update(to="folder", path=str(Path(args.to).expanduser().absolute()))
    info = runinfo.running(settings.data_dir)
    if info is not None:
        result = call(info["base_url"], token_for(settings), "POST",
                      f"/api/sessions/{args.session}/export", params)
    else:
        result = asyncio.run(_export_here(settings, args.session, params))
    print(json.dumps(result, indent=1))
    return 1 if result.get("conflicts") else 0


async def _export_here(settings: Settings, session_id: str, params: dict[str, Any]) -> Any:
    from server.app.braid import Braid
    from server.base.errors import BraidError
    from server.features.sources.exporting import export_session
    from server.store.users import DEFAULT_USER

    braid = Braid(settings)
    await braid.start()
    try:
        return await export_session(braid, DEFAULT_USER, session_id, params["to"],
                                    params.get("path"), params["force"])
    except BraidError as e:
        raise SystemExit(f"braid: {e.message}") from e
    finally:
        await braid.stop()


def add_commands(sub: Any, settings_of: Any) -> None:
    p = sub.add_parser("open", help="start a session from a folder or git repository and "
                                    "open it in the browser (starting the server if needed)")
    p.add_argument("path")
    p.add_argument("--git", action="store_true", help="import the repository's committed "
                                                      "tree (HEAD) instead of the folder")
    p.add_argument("--ref", help="import the repository at this ref (implies --git)")
    p.add_argument("--title")
    p.add_argument("--no-browser", action="store_true", help="or BRAID_NO_BROWSER=on")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir")
    p.set_defaults(fn=lambda a: open_project(settings_of(a), a))
    p = sub.add_parser("export", help="write a session's work to a folder, or to a branch "
                                      "of its git source (--to branch)")
    p.add_argument("session")
    p.add_argument("--to", required=True, help="a folder path, or `branch`")
    p.add_argument("--force", action="store_true",
                   help="overwrite files changed in the folder since the import")
    p.add_argument("--data-dir")
    p.set_defaults(fn=lambda a: export(settings_of(a), a))
