"""Import (DESIGN §4 "Import and export", §5 `POST /api/sessions` with `source`) against a real
server: a folder matches `git ls-files --others --cached --exclude-standard`, a tag matches
`git archive`, and every bad source is a clear error that creates nothing."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, free_port, git


def workdir_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def make_project(base: Path) -> Path:
    """A folder as users have them: a .gitignore (with a nested one), node_modules/, build
    output, a .braidignore, a file over the 5 MB cap, and an untracked file next to
    committed ones."""
    src = base / "project"
    (src / "node_modules" / "left-pad").mkdir(parents=True)
    (src / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (src / "src" / "gen").mkdir(parents=True)
    (src / ".gitignore").write_text("node_modules/\n*.log\n/dist\n")
    (src / "src" / ".gitignore").write_text("gen/\n!keep.log\n")
    (src / "src" / "main.py").write_text("print('hi')\n")
    (src / "src" / "keep.log").write_text("kept by a negation\n")
    (src / "src" / "gen" / "out.py").write_text("generated\n")
    (src / "debug.log").write_text("noise\n")
    (src / "dist").mkdir()
    (src / "dist" / "bundle.js").write_text("bundle\n")
    (src / "README.md").write_text("# project\n")
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "run.sh").chmod(0o755)
    (src / ".braidignore").write_text("secrets.env\n")
    (src / "secrets.env").write_text("TOKEN=1\n")
    (src / "big.bin").write_bytes(b"\0" * (6 * 1024 * 1024))
    (src / "empty.txt").write_bytes(b"")
    (src / "copy.md").write_text("# project\n")  # the same blob as README.md, packed once
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "README.md", "src/main.py")
    git(src, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "first")
    return src


def ls_files(folder: Path) -> list[str]:
    return sorted(git(folder, "ls-files", "--others", "--cached", "--exclude-standard")
                  .splitlines())


@pytest.mark.slow
def test_folder_import_holds_what_git_ls_files_lists(srv: Server, roots: Path) -> None:
    src = make_project(roots)
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    assert status == 201, body
    path = srv.session_path(body["session_id"])
    expected = [p for p in ls_files(src) if p not in ("big.bin", "secrets.env")]
    assert "node_modules/left-pad/index.js" not in expected and "src/keep.log" in expected
    files = workdir_files(path / "workdir")
    assert sorted(files) == expected
    assert all(files[p] == (src / p).read_bytes() for p in expected)
    assert (path / "workdir" / "run.sh").stat().st_mode & 0o100
    assert body["import"]["skipped"] == [{"path": "big.bin", "size": 6 * 1024 * 1024,
                                          "reason": "too large"}]
    assert body["title"] == "project"
    # The import is the session's first commit; its tree has the same files.
    log = git(path, "log", "--format=%H %s").splitlines()
    assert len(log) == 1
    message = git(path, "log", "-1", "--format=%B")
    assert "Braid-Kind: import" in message and f"Braid-Source: folder {src}" in message
    assert "big.bin" in message
    assert sorted(git(path, "ls-tree", "-r", "--name-only", "HEAD", "workdir/").split()) == \
        [f"workdir/{p}" for p in expected]
    assert git(path, "status", "--porcelain") == ""
    meta = json.loads((path / "session.json").read_text())
    # The folder is a repository's work tree: its HEAD is the base an export starts from.
    assert meta["source"] == {"kind": "folder", "path_or_url": str(src),
                              "base_commit": git(src, "rev-parse", "HEAD").strip()}
    assert_fsck(path)
    # The session works as any other: a turn on the imported files.
    run = srv.run(body["session_id"], "append README.md more")
    assert run["status"] == "COMPLETED"
    assert (path / "workdir" / "README.md").read_text() == "# project\nmore\n"
    assert (src / "README.md").read_text() == "# project\n"  # the source is untouched


def test_folder_outside_a_repository_is_listed_by_git_too(srv: Server, roots: Path) -> None:
    src = roots / "plain"
    (src / "build").mkdir(parents=True)
    (src / ".gitignore").write_text("build/\n")
    (src / "build" / "x.o").write_text("o")
    (src / "keep.c").write_text("int main;\n")
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(src)},
                                                    "title": "Mine"})
    assert status == 201, body
    assert body["title"] == "Mine" and "base_commit" not in body["source"]
    files = workdir_files(srv.session_path(body["session_id"]) / "workdir")
    assert sorted(files) == [".gitignore", "keep.c"]


def make_repo(base: Path) -> tuple[Path, Path]:
    """A work tree with two tagged commits, and a bare clone of it."""
    work = base / "repo"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "a.txt").write_text("one\n")
    (work / "lib").mkdir()
    (work / "lib" / "util.py").write_text("def f():\n    return 1\n")
    git(work, "add", "-A")
    git(work, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "v1")
    git(work, "tag", "-a", "v1", "-m", "version 1")
    (work / "a.txt").write_text("two\n")
    (work / "b.txt").write_text("new\n")
    git(work, "add", "-A")
    git(work, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "v2")
    bare = base / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return work, bare


def archive(repo: Path, ref: str) -> dict[str, bytes]:
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", ref],
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                if m.isfile()}


@pytest.mark.parametrize("how", ["path", "file_url"])
def test_git_import_at_a_tag_equals_git_archive(srv: Server, roots: Path, how: str) -> None:
    _, bare = make_repo(roots)
    where = str(bare) if how == "path" else f"file://{bare}"
    status, body = srv.api("POST", "/api/sessions", {"source": {"git": where, "ref": "v1"}})
    assert status == 201, body
    path = srv.session_path(body["session_id"])
    assert workdir_files(path / "workdir") == archive(bare, "v1")
    tag_commit = git(bare, "rev-parse", "v1^{commit}").strip()
    meta = json.loads((path / "session.json").read_text())
    assert meta["source"] == {"kind": "git", "path_or_url": str(bare), "ref": "v1",
                              "base_commit": tag_commit}
    assert f"Braid-Source-Commit: {tag_commit}" in git(path, "log", "-1", "--format=%B")
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_git_import_defaults_to_head_of_a_work_tree(srv: Server, roots: Path) -> None:
    work, _ = make_repo(roots)
    (work / "dirty.txt").write_text("not committed\n")
    status, body = srv.api("POST", "/api/sessions", {"source": {"git": str(work)}})
    assert status == 201, body
    files = workdir_files(srv.session_path(body["session_id"]) / "workdir")
    assert files == archive(work, "HEAD")  # the committed tree, not the work tree
    assert git(work, "status", "--porcelain") == "?? dirty.txt\n"


def assert_nothing_created(srv: Server, before: set[str]) -> None:
    sessions = srv.data_dir / "sessions"
    assert {p.name for p in sessions.iterdir()} == before
    assert not list((srv.data_dir / "tmp").glob("*")) if (srv.data_dir / "tmp").exists() \
        else True


def test_bad_sources_are_clear_errors_and_create_nothing(srv: Server, roots: Path,
                                                         tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (roots / "file.txt").write_text("x")
    (roots / "link").symlink_to(outside)
    _, bare = make_repo(roots)
    before = {p.name for p in (srv.data_dir / "sessions").iterdir()}
    cases = [
        ({"path": str(outside)}, 403, "forbidden", "BRAID_IMPORT_ROOTS"),
        ({"path": str(roots / "link")}, 403, "forbidden", "BRAID_IMPORT_ROOTS"),
        ({"git": str(outside / "missing.git")}, 403, "forbidden", "BRAID_IMPORT_ROOTS"),
        ({"path": str(roots / "missing")}, 400, "bad_request", "no such folder"),
        ({"path": str(roots / "file.txt")}, 400, "bad_request", "is a file"),
        ({"git": "http://127.0.0.1:9/nothing.git"}, 403, "forbidden", "BRAID_IMPORT_SCHEMES"),
        ({"git": "https://127.0.0.1:9/nothing.git"}, 403, "forbidden", "BRAID_IMPORT_HOSTS"),
        ({"git": "https://[::1]:9/x.git"}, 403, "forbidden", "BRAID_IMPORT_HOSTS"),
        ({"git": "ext::sh -c touch% /tmp/x"}, 400, "bad_request", "not an absolute path"),
        ({"git": "ftp://example.com/x.git"}, 400, "bad_request", "not a git URL"),
        ({"git": str(roots / "missing.git")}, 400, "bad_request", "no such folder"),
        ({"git": str(bare), "ref": "v9"}, 400, "bad_request", "no commit"),
        ({"git": str(roots)}, 400, "bad_request", "not a git repository"),
        ({"git": "--upload-pack=touch /tmp/x"}, 400, "bad_request", "not a valid"),
        ({"path": 5}, 400, "bad_request", "source.path"),
        ({"path": "project"}, 400, "bad_request", "not an absolute path"),
        ({"path": "a", "git": "b"}, 400, "bad_request", "source must be"),
        ("folder", 400, "bad_request", "source must be"),
    ]
    for source, code, name, words in cases:
        status, body = srv.api("POST", "/api/sessions", {"source": source})
        assert status == code, (source, body)
        assert body["error"]["code"] == name and words in body["error"]["message"], body
        assert_nothing_created(srv, before)
    status, listed = srv.api("GET", "/api/sessions")
    assert {s["session_id"] for s in listed["sessions"]} == before


@pytest.mark.slow
def test_nested_repositories_are_listed_in_skipped(srv: Server, roots: Path) -> None:
    """Issue 21 row 17: an untracked nested repository (its own `.git` folder, or a `.git`
    file as `git worktree add` makes) is left out, and said so, in a repository and in a
    plain folder alike."""
    src = make_project(roots)
    nested = src / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "lib.c").write_text("int lib;\n")
    git(src, "worktree", "add", "-q", "--detach", str(src / "wt"))
    plain = roots / "plain"
    (plain / "inner").mkdir(parents=True)
    (plain / "top.txt").write_text("top\n")
    git(plain / "inner", "init", "-q")
    (plain / "inner" / "x.txt").write_text("x\n")
    for folder, wanted in ((src, ["vendor/lib/", "wt/"]), (plain, ["inner/"])):
        status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(folder)}})
        assert status == 201, body
        skipped = {s["path"]: s["reason"] for s in body["import"]["skipped"]}
        assert {p: skipped.get(p) for p in wanted} == \
            {p: "a nested git repository" for p in wanted}, skipped
        files = workdir_files(srv.session_path(body["session_id"]) / "workdir")
        assert not [p for p in files if p.startswith(tuple(wanted))]
        message = git(srv.session_path(body["session_id"]), "log", "-1", "--format=%B")
        assert all(f"{p} (a nested git repository" in message for p in wanted)


# -- git URLs (issue 21 row 7) --------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def http_server(handler: Any) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def dumb_repo_server(base: Path) -> Any:
    """A bare repository served over plain (dumb) HTTP on 127.0.0.1."""
    _, bare = make_repo(base)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    return bare, functools.partial(_Quiet, directory=str(base))


class _NotGit(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"SSH-2.0-OpenSSH_9.2 internal admin panel: secret-banner\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.slow
def test_a_url_on_the_servers_own_network_is_forbidden(server_factory: Any,
                                                       tmp_path: Path) -> None:
    """http:// on 127.0.0.1 (or a name resolving to it): `forbidden` unless BRAID_IMPORT_HOSTS
    lists it, and then cloned; any failure (a closed port, a service that is not git, a
    redirect) says the same few words and nothing of what answered."""
    base = tmp_path / "served"
    base.mkdir()
    bare, handler = dumb_repo_server(base)
    closed = free_port()
    with http_server(handler) as port, http_server(_NotGit) as other:
        url = f"http://127.0.0.1:{port}/repo.git"
        srv = server_factory(BRAID_IMPORT_SCHEMES="http,https")
        for where in (url, f"http://localhost:{port}/repo.git", f"http://[::1]:{port}/x"):
            status, body = srv.api("POST", "/api/sessions", {"source": {"git": where}})
            assert status == 403 and "BRAID_IMPORT_HOSTS" in body["error"]["message"], body
        srv.stop()
        srv = server_factory(BRAID_IMPORT_SCHEMES="http", BRAID_IMPORT_HOSTS="127.0.0.0/8")
        for where in (url, f"http://localhost:{port}/repo.git"):  # a name: pinned to 127.0.0.1
            status, body = srv.api("POST", "/api/sessions", {"source": {"git": where,
                                                                        "ref": "v1"}})
            assert status == 201, body
            assert workdir_files(srv.session_path(body["session_id"]) / "workdir") == \
                archive(bare, "v1")
        errors = []
        with http_server(_redirect_to(port)) as redirecting:
            for where in (f"http://127.0.0.1:{closed}/repo.git",
                          f"http://127.0.0.1:{other}/repo.git",
                          f"http://127.0.0.1:{redirecting}/repo.git"):
                status, body = srv.api("POST", "/api/sessions", {"source": {"git": where}})
                errors.append((status, body["error"]))
        assert errors == [(400, {"code": "bad_request", "message": "could not fetch URL"})] * 3


def _redirect_to(port: int) -> Any:
    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{port}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Redirect


def test_the_checked_address_is_the_one_git_connects_to() -> None:
    """DNS rebinding: the clone's own connection is pinned (curl's resolve list) to the
    addresses just checked, redirects are off, and only the URL's transport is on."""
    from server.base.errors import BadRequest
    from server.base.settings import Settings
    from server.features.sources.git_urls import clone_plan, parse_url

    settings = Settings(import_schemes=("https",), import_hosts=("localhost",))
    url, config = clone_plan(settings, parse_url(settings, "https://LocalHost:8443/r.git"))
    assert url == "https://localhost:8443/r.git"
    assert config[:2] == ("protocol.https.allow=always", "http.followRedirects=false")
    assert config[2].startswith("http.curloptResolve=localhost:8443:")
    assert "127.0.0.1" in config[2].split(":", 2)[2]
    for bad in ("https://a@127.0.0.1@evil.example/x", "https://127.1/x", "https://2130706433/x",
                "https://evil.example\\@127.0.0.1/x", "https://exa mple/x"):
        with pytest.raises(BadRequest, match="host|ASCII"):
            parse_url(settings, bad)


def test_an_ipv4_address_carried_in_an_ipv6_one_is_judged_as_itself() -> None:
    """Mapped, 6to4, NAT64 (RFC 6052), SIIT and IPv4-compatible forms all reach the IPv4
    address in their low bits: a private one is internal, a public one is not."""
    import ipaddress

    from server.agent.sandbox.addresses import internal

    for inside in ("::ffff:127.0.0.1", "2002:7f00:1::", "64:ff9b::7f00:1", "64:ff9b::a00:1",
                   "64:ff9b:1::c0a8:1", "::ffff:0:7f00:1", "::127.0.0.1", "::1", "fd00::1"):
        assert internal(ipaddress.ip_address(inside)), inside
    for outside in ("64:ff9b::808:808", "::ffff:8.8.8.8", "2001:4860:4860::8888", "8.8.8.8"):
        assert not internal(ipaddress.ip_address(outside)), outside


def test_imports_of_folders_with_one_name_get_titles_told_apart(srv: Server,
                                                               roots: Path) -> None:
    titles = []
    for parent in ("work", "other", "work2/other"):
        folder = roots / parent / "app"
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text(parent)
        status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(folder)}})
        assert status == 201, body
        titles.append(body["title"])
    assert titles == ["app", "app (other)", "app (2)"]  # the third's folder is "other" too
    # The sidebar lists them by those titles.
    status, listed = srv.api("GET", "/api/sessions")
    assert status == 200
    shown = {row["title"] for row in listed["sessions"]}
    assert set(titles) <= shown


def test_import_title_words() -> None:
    from server.features.sources.importing import import_title

    assert import_title("/home/u/app", set()) == "app"
    assert import_title("/home/u/app", {"app"}) == "app (u)"
    assert import_title("https://example.com/o/repo.git", {"repo"}) == "repo (o)"
    assert import_title("/app", {"app"}) == "app (2)"
