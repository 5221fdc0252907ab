"""Issue 21, rows 1-3 (DESIGN §4 "Boundaries"), as the attacks were made, against a real server
and real repositories: git never runs a repository's code (a hostile `.git/config` whose
`core.fsmonitor` would write a marker file: the marker never appears), the data dir is never
imported or exported whatever the roots say, roots are per user (`braid user add --roots`),
and a `.git` file, commondir or alternates leading out of the roots is `forbidden`."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Server, assert_fsck, git, upload

GIT_USER = ["-c", "user.name=T", "-c", "user.email=t@x"]


def hostile_config(marker: Path) -> str:
    """Every key that would make git run a command, each one writing `marker`."""
    cmd = f"touch {marker}"
    return (f'[core]\n\tfsmonitor = "{cmd}"\n\thooksPath = {marker.parent}/hooks\n'
            f'\tsshCommand = "{cmd}"\n\tpager = "{cmd}"\n\tgitProxy = "{cmd}"\n'
            f'\taskPass = "{cmd}"\n[diff]\n\texternal = "{cmd}"\n'
            f'[credential]\n\thelper = "!{cmd}"\n[filter "x"]\n\tclean = "{cmd}"\n'
            f'\tsmudge = "{cmd}"\n\tprocess = "{cmd}"\n')


def make_repo(where: Path, marker: Path, files: dict[str, str] | None = None) -> Path:
    """A project as downloaded: commits, an untracked file, and a `.git/config` of its own
    that runs `touch marker` from every key git honours (hooks too)."""
    where.mkdir(parents=True)
    git(where, "init", "-q", "-b", "main")
    for rel, text in (files or {"a.txt": "one\n", "lib/b.py": "x = 1\n"}).items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text)
    (where / ".gitattributes").write_text("* filter=x diff=x\n")
    git(where, "add", "-A")
    git(where, *GIT_USER, "commit", "-qm", "v1")
    (where / "untracked.txt").write_text("new\n")
    hooks = marker.parent / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("post-checkout", "pre-commit", "post-index-change", "fsmonitor-watchman",
                 "reference-transaction", "pre-auto-gc"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
    with open(where / ".git" / "config", "a") as f:
        f.write(hostile_config(marker))
    return where


def upload_one(srv: Server, sid: str, name: str, data: bytes) -> tuple[int, Any]:
    """One file through the page's upload (multipart), as a browser sends it."""
    return upload(srv, sid, [(name, data)])


def add_user(srv: Server, name: str, *extra: str) -> str:
    out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", name, *extra,
                          "--data-dir", str(srv.data_dir)], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_row1a_config_exported_into_a_sessions_git_dir_runs_nothing(server_factory: Any,
                                                                     tmp_path: Path) -> None:
    """The data dir inside the roots (as the default ~/.braid in ~): upload `config`, export
    it to `<data>/sessions/<sid>/.git` (force), import `<data>/sessions/<sid>`."""
    srv: Server = server_factory(BRAID_IMPORT_ROOTS=str(tmp_path))
    marker = tmp_path / "owned.txt"
    sid = srv.new_session()
    status, body = upload_one(srv, sid, "config", hostile_config(marker).encode())
    assert status == 201, body
    session = srv.session_path(sid)
    status, body = srv.api("POST", f"/api/sessions/{sid}/export",
                           {"to": "folder", "path": str(session / ".git"), "force": True})
    assert status == 403 and body["error"]["code"] == "forbidden", body
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(session)}})
    assert status == 403 and body["error"]["code"] == "forbidden", body
    status, body = srv.api("POST", "/api/sessions", {"source": {"git": str(session)}})
    assert status == 403 and body["error"]["code"] == "forbidden", body
    assert not marker.exists()
    assert "fsmonitor" not in (session / ".git" / "config").read_text()
    assert_fsck(session)


@pytest.mark.parametrize("with_objects", [True, False])
def test_row1b_a_git_dir_made_in_a_root_runs_nothing(srv: Server, roots: Path, tmp_path: Path,
                                                     with_objects: bool) -> None:
    """`config`, `HEAD`, `refs/heads/x` put into `<root>/newproj/.git` (by an export before
    the name rule; here by hand), then `<root>/newproj` imported: no command runs."""
    marker = tmp_path / "owned.txt"
    proj = roots / "newproj"
    (proj / ".git" / "refs" / "heads").mkdir(parents=True)
    if with_objects:
        (proj / ".git" / "objects").mkdir()
    (proj / ".git" / "config").write_text(hostile_config(marker))
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/x\n")
    (proj / ".git" / "refs" / "heads" / "x").write_text("0" * 40 + "\n")
    (proj / "main.py").write_text("print(1)\n")
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(proj)}})
    assert status == 201, body
    files = sorted(p.name for p in (srv.session_path(body["session_id"]) / "workdir").iterdir())
    assert files == ["main.py"]
    srv.api("POST", "/api/sessions", {"source": {"git": str(proj)}})  # any answer: no command
    assert not marker.exists()


@pytest.mark.slow
def test_row1c_a_downloaded_projects_hostile_config_runs_nothing(srv: Server, roots: Path,
                                                                tmp_path: Path) -> None:
    """Import as a folder and as git, update from source, export to a branch and to the
    folder: every git Braid runs there ignores the project's config."""
    marker = tmp_path / "owned.txt"
    proj = make_repo(roots / "proj", marker)
    before = git(proj, "rev-parse", "HEAD").strip()
    assert not marker.exists()
    status, folder = srv.api("POST", "/api/sessions", {"source": {"path": str(proj)}})
    assert status == 201, folder
    assert folder["source"]["base_commit"] == before
    assert folder["import"]["files"] == 4  # a.txt, lib/b.py, .gitattributes, untracked.txt
    status, repo = srv.api("POST", "/api/sessions", {"source": {"git": str(proj)}})
    assert status == 201, repo
    (proj / "untracked.txt").write_text("changed\n")
    for sid in (folder["session_id"], repo["session_id"]):
        srv.run(sid, "write notes.md hello")
        status, body = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
        assert status == 200, body
    status, body = srv.api("POST", f"/api/sessions/{repo['session_id']}/export",
                           {"to": "branch"})
    assert status == 200, body
    assert git(proj, "log", "-1", "--format=%s", f"refs/heads/{body['branch']}").strip()
    status, body = srv.api("POST", f"/api/sessions/{folder['session_id']}/export",
                           {"to": "folder"})
    assert status == 200 and body["written"] == ["notes.md"], body
    assert not marker.exists()
    assert git(proj, "rev-parse", "HEAD").strip() == before


@pytest.mark.slow
def test_row2_roots_are_per_user_and_the_data_dir_is_never_reached(server_factory: Any,
                                                                    tmp_path: Path) -> None:
    """local: BRAID_IMPORT_ROOTS (here tmp_path, which holds the data dir); bob: none until
    `braid user add bob --roots`, then only his own."""
    srv: Server = server_factory(BRAID_IMPORT_ROOTS=str(tmp_path))
    mine, his = tmp_path / "alice", tmp_path / "bob"
    for folder in (mine, his):
        folder.mkdir()
        (folder / "f.txt").write_text(folder.name)
    sid = srv.new_session()
    bob = add_user(srv, "bob")
    for token, source, code in [
            (bob, {"path": str(his)}, 403),  # no roots yet
            (None, {"path": str(srv.data_dir)}, 403),
            (None, {"path": str(srv.session_path(sid))}, 403),
            (None, {"path": str(srv.session_path(sid) / "workdir")}, 403),
            (None, {"git": str(srv.session_path(sid))}, 403),
            (None, {"path": str(his)}, 201)]:
        status, body = srv.api("POST", "/api/sessions", {"source": source}, token=token)
        assert status == code, (source, body)
    out = subprocess.run([sys.executable, "-m", "server.cli", "user", "add", "bob", "--roots",
                          f"{his}:{srv.data_dir}", "--data-dir", str(srv.data_dir)],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    bob = out.stdout.strip().splitlines()[-1]
    assert f"bob's roots: {his}, {srv.data_dir}" in out.stderr
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(his)}}, token=bob)
    assert status == 201, body
    bobs = body["session_id"]
    for source in ({"path": str(mine)}, {"path": str(srv.data_dir)},
                   {"path": str(srv.session_path(sid))}, {"path": str(tmp_path)}):
        status, body = srv.api("POST", "/api/sessions", {"source": source}, token=bob)
        assert status == 403 and body["error"]["code"] == "forbidden", (source, body)
    # Exports: bob's own root only; nobody's into (or around) the data dir.
    for token, session, path, code in [
            (bob, bobs, mine / "out", 403), (bob, bobs, srv.data_dir / "x", 403),
            (bob, bobs, srv.data_dir / "sessions" / sid, 403), (bob, bobs, his / "out", 200),
            (None, sid, srv.data_dir / "sessions" / sid / ".git", 403),
            (None, sid, tmp_path, 403), (None, sid, mine / "out", 200)]:
        status, body = srv.api("POST", f"/api/sessions/{session}/export",
                               {"to": "folder", "path": str(path)}, token=token)
        assert status == code, (path, body)
    assert not (mine / "out").exists() or not list((mine / "out").iterdir())
    assert not (srv.data_dir / "x").exists()


@pytest.mark.slow
def test_row2_a_folder_holding_the_data_dir_leaves_it_out(server_factory: Any,
                                                          tmp_path: Path) -> None:
    """Importing the folder that holds the data dir (the home folder, as ~/.braid is): the
    data dir's files (users.sqlite3, the token, every session) stay out, said in skipped."""
    home = tmp_path / "home"
    (home / "code").mkdir(parents=True)
    (home / "code" / "x.py").write_text("x\n")
    srv: Server = server_factory(data_dir=home / ".braid", BRAID_IMPORT_ROOTS=str(home))
    srv.new_session()
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(home)}})
    assert status == 201, body
    workdir = srv.session_path(body["session_id"]) / "workdir"
    imported = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
    assert [p for p in imported if not p.startswith("server-")] == ["code/x.py"]  # + its log
    assert {"path": ".braid/", "reason": "Braid's data folder: never imported", "size": 0} \
        in body["import"]["skipped"]
    status, body = srv.api("POST", f"/api/sessions/{body['session_id']}/export",
                           {"to": "folder", "path": str(home)})
    assert status == 403, body


@pytest.mark.slow
def test_row2_users_made_before_roots_get_the_column(server_factory: Any, tmp_path: Path,
                                                     roots: Path) -> None:
    """A users.sqlite3 of the old schema: opened, migrated, its users kept."""
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / "users.sqlite3")
    db.execute("CREATE TABLE users (user_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL "
               "UNIQUE, created_at TEXT NOT NULL)")
    db.commit()
    db.close()
    srv: Server = server_factory(data_dir=data, BRAID_IMPORT_ROOTS=str(roots))
    (roots / "p").mkdir()
    bob = add_user(srv, "bob", "--roots", str(roots))
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(roots / "p")}},
                           token=bob)
    assert status == 201, body
    assert srv.api("GET", "/api/sessions")[0] == 200  # local's token still works


def outside_repo(tmp_path: Path, marker: Path) -> Path:
    return make_repo(tmp_path / "outside" / "real", marker, {"secret.txt": "not yours\n"})


@pytest.mark.slow
def test_row3_a_git_file_leading_out_of_the_roots_is_refused(srv: Server, roots: Path,
                                                             tmp_path: Path) -> None:
    """A `.git` file (`gitdir: /elsewhere`), a commondir and object alternates leading out of
    the roots (or into the data dir): import as a folder or as git is `forbidden`."""
    marker = tmp_path / "owned.txt"
    real = outside_repo(tmp_path, marker)
    sid = srv.new_session()
    cases = []
    link = roots / "link"
    link.mkdir()
    (link / ".git").write_text(f"gitdir: {real / '.git'}\n")
    (link / "f.txt").write_text("x\n")
    cases.append(link)
    into_data = roots / "into_data"
    into_data.mkdir()
    (into_data / ".git").write_text(f"gitdir: {srv.session_path(sid) / '.git'}\n")
    cases.append(into_data)
    alt = roots / "alt"
    alt.mkdir()
    git(alt, "init", "-q")
    (alt / ".git" / "objects" / "info" / "alternates").write_text(f"{real}/.git/objects\n")
    cases.append(alt)
    common = roots / "common"
    subprocess.run(["git", "clone", "-q", str(real), str(common)], check=True)
    (common / ".git" / "commondir").write_text(f"{real / '.git'}\n")
    cases.append(common)
    for part in ("refs", "objects", "refs/heads/main"):  # where an export to a branch writes
        linked = roots / f"linked-{part.replace('/', '-')}"
        subprocess.run(["git", "clone", "-q", str(real), str(linked)], check=True)
        subprocess.run(["rm", "-rf", str(linked / ".git" / part)], check=True)
        (linked / ".git" / part).symlink_to(real / ".git" / part)
        cases.append(linked)
    for folder in cases:
        for source in ({"path": str(folder)}, {"git": str(folder)}):
            status, body = srv.api("POST", "/api/sessions", {"source": source})
            assert status == 403 and body["error"]["code"] == "forbidden", (source, body)
    assert not marker.exists()


@pytest.mark.slow
def test_row3_export_and_update_recheck_the_repository(srv: Server, roots: Path,
                                                       tmp_path: Path) -> None:
    """A source turned into a `.git` file pointing elsewhere after the import: update from
    source and export to a branch are refused and write nothing there."""
    marker = tmp_path / "owned.txt"
    real = outside_repo(tmp_path, marker)
    proj = roots / "proj"
    subprocess.run(["git", "clone", "-q", str(real), str(proj)], check=True)
    status, created = srv.api("POST", "/api/sessions", {"source": {"git": str(proj)}})
    assert status == 201, created
    sid = created["session_id"]
    srv.run(sid, "write notes.md hello")
    subprocess.run(["rm", "-rf", str(proj / ".git")], check=True)
    (proj / ".git").write_text(f"gitdir: {real / '.git'}\n")
    refs = git(real, "for-each-ref")
    for action, params in (("export", {"to": "branch"}), ("update_from_source", {})):
        status, body = srv.api("POST", f"/api/sessions/{sid}/{action}", params)
        assert status == 403 and body["error"]["code"] == "forbidden", (action, body)
    assert git(real, "for-each-ref") == refs
    assert not marker.exists()
