"""`braid open PATH` and `braid export SESSION --to PATH` as a user runs them: a real server
started in the background for the data dir (or the running one reused), the browser opener
called with the login URL of the new session (BROWSER names a script that records it)."""

from __future__ import annotations

import http.cookiejar
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, TOKEN, free_port, git


def braid(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_braid_open_imports_starts_the_server_and_opens_the_browser(tmp_path: Path) -> None:
    roots = tmp_path / "home"
    project = roots / "project"
    (project / "node_modules" / "dep").mkdir(parents=True)
    (project / "node_modules" / "dep" / "index.js").write_text("x\n")
    (project / ".gitignore").write_text("node_modules/\n*.tmp\n")
    (project / "app.py").write_text("print(1)\n")
    (project / "scratch.tmp").write_text("junk\n")
    (project / "video.bin").write_bytes(b"v" * (6 * 1024 * 1024))
    git(project, "init", "-q")
    opened = tmp_path / "browser.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    data = tmp_path / "data"
    env = {**os.environ, "BRAID_DATA_DIR": str(data), "BRAID_TOKEN": TOKEN,
           "BRAID_PORT": str(free_port()), "BRAID_IMPORT_ROOTS": str(roots),
           "BROWSER": f"{browser} %s"}
    env.pop("BRAID_NO_BROWSER", None)
    out = braid(env, "open", str(project))
    info = json.loads((data / "server.json").read_text()) if (data / "server.json").exists() \
        else None
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert info is not None
        url = next(line[len("Open: "):] for line in out.stdout.splitlines()
                   if line.startswith("Open: "))
        assert "skipped video.bin (too large" in out.stdout
        assert opened.read_text().split() == [url]  # the browser got the login URL
        session_id = url.rsplit("%2Fs%2F", 1)[1]
        workdir = data / "sessions" / session_id / "workdir"
        listed = git(project, "ls-files", "--others", "--cached", "--exclude-standard").split()
        assert sorted(listed) == [".gitignore", "app.py", "video.bin"]
        files = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
        assert files == [".gitignore", "app.py"]
        meta = json.loads((workdir.parent / "session.json").read_text())
        assert meta["import"]["skipped"][0]["path"] == "video.bin"
        # The URL logs the browser in and lands on the new session's page.
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        with opener.open(url, timeout=10) as res:
            assert res.url.endswith(f"/s/{session_id}") and res.status == 200
            assert b"video.bin" in res.read()  # the import summary names the skipped file

        # A second open reuses the running server; `braid export` goes through it too.
        other = roots / "other"
        other.mkdir()
        (other / "b.txt").write_text("b\n")
        again = braid({**env, "BRAID_NO_BROWSER": "1"}, "open", str(other))
        assert again.returncode == 0, again.stderr
        assert json.loads((data / "server.json").read_text())["pid"] == info["pid"]
        assert opened.read_text().split() == [url]  # --no-browser: not opened again
        target = roots / "out"
        exported = braid(env, "export", session_id, "--to", str(target))
        assert exported.returncode == 0, exported.stderr
        assert sorted(json.loads(exported.stdout)["written"]) == [".gitignore", "app.py"]
        assert (target / "app.py").read_text() == "print(1)\n"
        bad = braid(env, "open", str(tmp_path / "elsewhere"))
        assert bad.returncode != 0 and "BRAID_IMPORT_ROOTS" in bad.stderr
    finally:
        if info is not None:
            os.kill(info["pid"], signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (data / "server.json").exists():
                time.sleep(0.1)
    assert not (data / "server.json").exists()  # the server removed it as it stopped


def test_braid_export_without_a_server(tmp_path: Path) -> None:
    roots = tmp_path / "home"
    (roots / "src").mkdir(parents=True)
    (roots / "src" / "a.txt").write_text("a\n")
    data = tmp_path / "data"
    env = {**os.environ, "BRAID_DATA_DIR": str(data), "BRAID_TOKEN": TOKEN,
           "BRAID_IMPORT_ROOTS": str(roots)}
    code = ("import asyncio,sys\nfrom server.app.braid import Braid\n"
            "from server.base.settings import Settings\nfrom server.features import sessions\n"
            "from server.features.sources.sources import SourceRequest\n"
            "async def m():\n b=Braid(Settings.from_env()); await b.start()\n"
            f" r=await sessions.create_session(b,'local','',SourceRequest('folder',"
            f"'{roots / 'src'}'))\n"
            " print(r['session_id']); await b.stop()\nasyncio.run(m())\n")
    made = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)
    session_id = made.stdout.strip()
    out = braid(env, "export", session_id, "--to", str(roots / "copy"))
    assert out.returncode == 0, out.stderr
    assert (roots / "copy" / "a.txt").read_text() == "a\n"
    out = braid(env, "export", session_id, "--to", "branch")
    assert out.returncode != 0 and "git repository" in out.stderr
    assert not (data / "server.json").exists()
