"""Issue 21 row 8: no total limit on an import. A 1.2 MB tree-bomb repository (a tree that
repeats one subtree ten times, ten levels deep) wrote 500 MB into `workdir/` in 15 s. Now an
import and an update from source count bytes and files as they arrive (a repository's from
its object headers, before inflating) and stop at BRAID_IMPORT_MAX_BYTES / _FILES: HTTP 413
`too_large`, no session folder left, an update commits nothing and leaves `workdir/` as it
was. Through a real server, and `braid open` says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, TOKEN, assert_fsck, free_port, git

BLOB = 10_000  # bytes of the one blob the bomb repeats


def run_git(repo: Path, *args: str, data: bytes | None = None) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True,
                         check=True)
    return out.stdout.decode().strip()


def tree_bomb(path: Path, levels: int = 5, fan: int = 10, size: int = BLOB) -> Path:
    """A bare repository of a few kB whose one commit holds fan**levels files of `size`
    bytes (1 GB with the defaults): each tree names the one below it `fan` times."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    blob = run_git(path, "hash-object", "-w", "--stdin", data=b"x" * (size - 1) + b"\n")
    entries = "".join(f"100644 blob {blob}\tf{i}.txt\n" for i in range(fan))
    tree = run_git(path, "mktree", data=entries.encode())
    for _ in range(levels - 1):
        entries = "".join(f"040000 tree {tree}\td{i}\n" for i in range(fan))
        tree = run_git(path, "mktree", data=entries.encode())
    commit = run_git(path, "-c", "user.name=T", "-c", "user.email=t@x", "commit-tree", tree,
                     "-m", "bomb")
    run_git(path, "update-ref", "refs/heads/main", commit)
    run_git(path, "symbolic-ref", "HEAD", "refs/heads/main")
    return path


def sessions_of(srv: Any) -> set[str]:
    root = srv.data_dir / "sessions"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def refused(srv: Any, source: dict[str, str], words: str) -> float:
    before = sessions_of(srv)
    began = time.monotonic()
    status, body = srv.api("POST", "/api/sessions", {"source": source})
    took = time.monotonic() - began
    assert status == 413 and body["error"]["code"] == "too_large", body
    assert words in body["error"]["message"], body
    assert sessions_of(srv) == before  # the half-made session folder is gone
    assert srv.api("GET", "/api/sessions")[1]["sessions"] == []
    tmp = srv.data_dir / "tmp"
    assert not (tmp.is_dir() and list(tmp.iterdir())), list(tmp.iterdir())
    return took


@pytest.mark.slow
def test_a_tree_bomb_stops_at_the_limit(server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    roots.mkdir()
    bomb = tree_bomb(roots / "bomb.git")
    bomb_size = sum(p.stat().st_size for p in bomb.rglob("*") if p.is_file())
    assert bomb_size < 200_000
    srv = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_BYTES="3000000")
    took = refused(srv, {"git": str(bomb)}, "BRAID_IMPORT_MAX_BYTES")
    assert took < 15, took  # 300 files of the 1 GB, not the bomb
    # By files: the same bomb of 1-byte files (100,000 of them) against a files limit.
    small = tree_bomb(roots / "small.git", size=1)
    srv2 = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_FILES="2000")
    took = refused(srv2, {"git": str(small)}, "BRAID_IMPORT_MAX_FILES")
    assert took < 15, took
    # Under the limits, an import of the same kind goes through.
    ok = tree_bomb(roots / "ok.git", levels=2)
    status, body = srv.api("POST", "/api/sessions", {"source": {"git": str(ok)}})
    assert status == 201 and body["import"]["files"] == 100, body


@pytest.mark.slow
def test_a_folder_import_stops_at_the_limit(server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    project = roots / "project"
    project.mkdir(parents=True)
    for i in range(40):
        (project / f"f{i:02}.txt").write_bytes(b"y" * 1000)
    srv = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_FILES="30")
    refused(srv, {"path": str(project)}, "BRAID_IMPORT_MAX_FILES")
    srv2 = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_BYTES="20000")
    refused(srv2, {"path": str(project)}, "BRAID_IMPORT_MAX_BYTES")
    assert len(list(project.iterdir())) == 40  # the source is untouched


def test_an_update_past_the_limit_commits_nothing(server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    project = roots / "project"
    project.mkdir(parents=True)
    (project / "a.txt").write_text("a\n")
    srv = server_factory(BRAID_IMPORT_ROOTS=str(roots), BRAID_IMPORT_MAX_FILES="20")
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(project)}})
    assert status == 201, body
    sid = body["session_id"]
    repo = srv.session_path(sid)
    (repo / "workdir" / "mine.txt").write_text("the user's edit\n")  # not yet committed
    head = git(repo, "rev-parse", "HEAD").strip()
    for i in range(30):
        (project / f"new{i}.txt").write_text(f"{i}\n")
    status, body = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 413 and body["error"]["code"] == "too_large", body
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert sorted(p.name for p in (repo / "workdir").iterdir()) == ["a.txt", "mine.txt"]
    assert_fsck(repo)
    # Back under the limit, the update goes through.
    for i in range(30):
        (project / f"new{i}.txt").unlink()
    (project / "b.txt").write_text("b\n")
    status, body = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200 and body["updated_paths"] == ["b.txt"], body
    assert (repo / "workdir" / "mine.txt").exists()


def test_braid_open_says_the_source_is_too_large(tmp_path: Path) -> None:
    roots = tmp_path / "home"
    roots.mkdir()
    bomb = tree_bomb(roots / "bomb.git", levels=4)
    data = tmp_path / "data"
    env = {**os.environ, "BRAID_DATA_DIR": str(data), "BRAID_TOKEN": TOKEN,
           "BRAID_PORT": str(free_port()), "BRAID_IMPORT_ROOTS": str(roots),
           "BRAID_IMPORT_MAX_BYTES": "1000000", "BRAID_NO_BROWSER": "1"}
    out = subprocess.run([sys.executable, "-m", "server.cli", "open", "--git", "--no-browser",
                          str(bomb)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    try:
        assert out.returncode != 0
        assert "braid: the source's files add up to more than 1,000,000 bytes " \
               "(BRAID_IMPORT_MAX_BYTES)" in out.stderr, out.stderr
        assert not list((data / "sessions").iterdir())
    finally:  # the server `braid open` started in the background
        info = data / "server.json"
        if info.exists():
            pid = json.loads(info.read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while info.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
