"""A throwaway PostgreSQL cluster for the tests: Debian's binaries, `initdb` + `pg_ctl` on a
free port under a temp dir, torn down at the end of the pytest session.

`initdb` refuses to run as root: as root the cluster is made and run as the `postgres`
user (which Debian's package creates) through `runuser`."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = _free_port()
        # Not under pytest's tmp dirs: those are private to root, and the cluster's own user
        # must reach its folder.
        self.root = Path(tempfile.mkdtemp(prefix="braid-pg-"))
        self.data = self.root / "data"
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.url = f"postgresql://braid@127.0.0.1:{self.port}/braid"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {out.stdout}{out.stderr}")

    def start(self) -> Cluster:
        self._run("initdb", "-D", str(self.data), "-U", "braid", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")
        # Off the durability path: a throwaway cluster. max_connections covers several
        # servers' pools at once.
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", opts,
                  "-w", "-t", "60", "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "braid", "braid")
        return self

    def new_database(self, name: str) -> str:
        """A fresh database in the cluster, its URL (each test gets its own)."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "braid", name)
        return f"postgresql://braid@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    bindir = _bindir()
    if bindir is None:
        # scripts/test installs Debian's postgresql; without it these tests cannot run.
        pytest.fail("PostgreSQL is not installed: run scripts/setup --test")
    cluster = Cluster(bindir).start()
    yield cluster
    cluster.stop()


_COUNTER = iter(range(1, 1_000_000))


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A new, empty database for one test."""
    return pg_cluster.new_database(f"t{os.getpid()}_{next(_COUNTER)}_{int(time.time())}")


@pytest.fixture
def team_pair(tmp_path: Path, pg_url: str) -> Iterator[tuple[Any, Any]]:
    """A team server: processes A and B (`braid serve`, the root conftest's `Server`) on one
    data dir and one database; neither may log a traceback on the way."""
    from conftest import Server, free_port  # the root conftest loads this plugin

    data = tmp_path / "data"
    env = {"BRAID_DATABASE_URL": pg_url}
    a = Server(data_dir=data, port=free_port(), env=env).start()
    b = Server(data_dir=data, port=free_port(), env=env)
    try:
        b.start()
        yield a, b
    finally:
        b.stop()
        a.stop()
    for server in (a, b):
        assert server.log_path is not None
        log = server.log_path.read_text()
        assert "Traceback" not in log, log
