"""Which server serves a data dir: `$BRAID_DATA_DIR/server.json` ({pid, host, port}),
written when a server has started and removed when it stops, so `braid open` and
`braid export` use the running server rather than writing beside it."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import TypedDict

from server.base.proctree import pid_alive

INFO = "server.json"


def write(data_dir: Path, host: str, port: int) -> None:
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    path = data_dir / INFO
    tmp = path.with_name(f".{INFO}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": host, "port": port}))
    os.replace(tmp, path)


def clear(data_dir: Path) -> None:
    path = data_dir / INFO
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass




class RunInfo(TypedDict):
    """The live server of a data dir: its process and where it answers."""

    pid: int
    host: str
    port: int
    base_url: str


def running(data_dir: Path) -> RunInfo | None:
    """The live server of `data_dir` ({pid, host, port, base_url}), or None."""
    try:
        info = json.loads((data_dir / INFO).read_text())
        pid, host, port = int(info["pid"]), str(info["host"]), int(info["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not pid_alive(pid):
        return None
    base_url = f"http://{host}:{port}"
    try:
        urllib.request.urlopen(f"{base_url}/login", timeout=2).close()
    except OSError:
        return None
    return {"pid": pid, "host": host, "port": port, "base_url": base_url}
