"""The crash matrix's power-cut column (DESIGN "Durability"): the data dir lives on the
power-cut file system (tests/powercut.py), the server dies (at a crash point, or kill -9 at a
random moment while a client works), the power is cut (every write not fsynced is dropped),
and the server starts again. Then: every session opens, `git fsck` is clean, every run,
upload, import and merge whose completion the client saw is there with its files, and the index
agrees with git.

`BRAID_POWERCUT_SERVER=/path/to/a/checkout` runs that checkout's server instead (how the
note on issue 34 measured what today's main loses); the table of what each point lost is
printed either way.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import conftest
from conftest import Server, free_port, git, upload
from server.base.fsops import sync_tree
from tests.faults import test_crash_matrix as crash_matrix
from tests.faults.test_crash_matrix import (
    OPERATIONS,
    Template,
    build_template,
    crash_at,
    use_session,
)
from tests.powercut import Mount

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def server_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    other = os.environ.get("BRAID_POWERCUT_SERVER")
    if other:
        monkeypatch.setattr(conftest, "ROOT", Path(other))
    # The crash matrix's helpers start servers on the mount too: give them its patience.
    monkeypatch.setattr(crash_matrix, "Server", CutServer)


def on_mount(work: Path) -> tuple[Mount, Path]:
    """A power-cut mount at `work/mnt`, and a data dir on it reached through `work/run/data`
    (so the server's log, next to the data dir, stays off the mount and outlives a cut)."""
    mount = Mount(work).start()
    (mount.path / "data").mkdir()
    sync_tree(mount.path / "data")
    (work / "run").mkdir()
    (work / "run" / "data").symlink_to(mount.path / "data")
    return mount, work / "run" / "data"


# -- the checks after a cut ------------------------------------------------------------------


class CutServer(Server):
    """A server on the power-cut mount: every file operation is a round trip to a Python
    process, so its start is given longer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("start_seconds", 180)
        super().__init__(*args, **kwargs)

    def completed_runs(self, sid: str) -> set[str]:
        status, info = self.api("GET", f"/api/sessions/{sid}")
        assert status == 200, info
        return {r["run_id"] for r in info["runs"] if r["status"] == "COMPLETED"}


@dataclass
class Seen:
    """What a client was told is done: a session made, runs completed with their files."""
    sessions: set[str] = field(default_factory=set)
    # run_id (or an upload's "upload:<name>") -> (session, the file it made, its content)
    done: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped_by: list[str] = field(default_factory=list)  # how each client ended
    merges: int = 0  # merges seen done (so a run that never reached one says so)


def git_runs(repo: Path) -> dict[str, dict[str, str]]:
    """run_id -> {branch: status} from every branch's runs/ records."""
    out: dict[str, dict[str, str]] = {}
    for branch in git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split():
        for path in git(repo, "ls-tree", "-r", "--name-only", branch, "runs/").split():
            record = json.loads(git(repo, "show", f"{branch}:{path}"))
            out.setdefault(record["run_id"], {})[branch] = record["status"]
    return out


def session_lost(srv: CutServer, repo: Path, sid: str) -> list[str]:
    """A session that does not open, a repository git finds broken, an index that does not
    agree with git."""
    status, info = srv.api("GET", f"/api/sessions/{sid}")
    if status != 200:
        return [f"session {sid[:8]} does not open ({status})"]
    fsck = subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True,
                          text=True)
    if fsck.returncode != 0:
        return [f"session {sid[:8]}: git fsck: {(fsck.stdout + fsck.stderr)[:160]!r}"]
    lost = []
    indexed = {r["run_id"]: r for r in info["runs"]}
    in_git = git_runs(repo)
    if set(indexed) != set(in_git):
        lost.append(f"session {sid[:8]}: index and git disagree on runs "
                    f"{sorted(r[:8] for r in set(indexed) ^ set(in_git))}")
    for run_id, row in indexed.items():
        statuses = in_git.get(run_id, {})
        if row["branch"] in statuses and statuses[row["branch"]] != row["status"]:
            lost.append(f"run {run_id[:8]}: index {row['status']}, "
                        f"git {statuses[row['branch']]}")
    return lost


def done_lost(srv: CutServer, repo: Path, key: str, rel: str, content: bytes) -> str | None:
    """Why something the client saw done is not there (None: it is)."""
    if ":" not in key and key not in srv.completed_runs(repo.name):
        return f"run {key[:8]} (completed) lost"
    try:
        kept: bytes | None = git(repo, "show", f"HEAD:workdir/{rel}").encode()
    except AssertionError:  # not there
        kept = None
    if kept != content:
        return f"{rel} of {key[:15]} lost from git"
    path = repo / "workdir" / rel
    if not path.exists() or path.read_bytes() != content:
        return f"{rel} of {key[:15]} lost from the working tree"
    return None


def lost_in(srv: CutServer, data_dir: Path, seen: Seen) -> list[str]:
    """Everything that breaks the promise, as sentences (empty: nothing lost). What is found
    lost is forgotten from `seen`: the next cut checks what came after."""
    sessions = data_dir / "sessions"
    on_disk = {p.name for p in sessions.iterdir() if p.is_dir() and not p.name.startswith(".")}
    lost = [f"session {sid[:8]} gone" for sid in sorted(seen.sessions - on_disk)]
    for sid in sorted(on_disk):
        lost += session_lost(srv, sessions / sid, sid)
    for key, (sid, rel, content) in sorted(seen.done.items()):
        why = done_lost(srv, sessions / sid, key, rel, content) if sid in on_disk else ""
        if why is not None:
            if why:
                lost.append(why)
            del seen.done[key]
    seen.sessions &= on_disk
    return lost


# -- at every crash point ----------------------------------------------------------------------

POINTS = [  # the points after which a commit is made, and one inside recovery's rollback
    ("checkpoint", "checkpoint.after_commit"), ("checkpoint", "checkpoint.before_commit"),
    ("revert", "revert.after_commit"), ("revert", "revert.after_files"),
    ("merge", "merge.after_commit"), ("merge", "merge.after_files"),
    ("fork", "fork.after_checkout"), ("sub-agent", "sub-agent.after_commit"),
    ("checkout", "checkout.after_head"), ("rewind", "rewind.after_files"),
]


def cut_case(template: Template, op: str, point: str, work: Path) -> list[str]:
    """Crash at `point`, cut the power, restart: what was lost (empty: nothing)."""
    mount, data_dir = on_mount(work)
    try:
        shutil.rmtree(mount.path / "data")
        shutil.copytree(template.data_dir, mount.path / "data", symlinks=True)
        sync_tree(mount.path / "data")  # the template is on disk before the case starts
        repo = data_dir / "sessions" / template.sid
        before = git(repo, "for-each-ref", "--format=%(objectname)").split()
        frame = OPERATIONS[op][0](template)
        announced = crash_at(data_dir, point, frame, template.sid)
        mount.cut()
        srv = CutServer(data_dir=data_dir, port=free_port()).start()
        try:
            seen = Seen(sessions={template.sid})
            lost = lost_in(srv, data_dir, seen)
            if not lost:
                reachable = set(git(repo, "rev-list", "--all").split())
                lost += [f"commit {c[:8]} lost" for c in before + announced
                         if c not in reachable]
            if not lost:
                if git(repo, "symbolic-ref", "--short", "HEAD").strip() != "main":
                    ws = srv.socket(template.sid)
                    assert ws.call("checkout", ref="main")["type"] == "result"
                    ws.close()
                use_session(srv, template.sid)
            return lost
        finally:
            srv.stop()
    finally:
        mount.stop()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    saved = crash_matrix.Server
    crash_matrix.Server = CutServer  # off the mount, but on a machine that may be busy
    try:
        return build_template(tmp_path_factory.mktemp("powercut") / "template")
    finally:
        crash_matrix.Server = saved


def test_power_cut_at_each_crash_point(template: Template, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    only = os.environ.get("BRAID_FAULT_ONLY")  # while developing: one operation's points
    for n, (op, point) in enumerate(p for p in POINTS if not only or only in p):
        rows.append((op, point, cut_case(template, op, point, tmp_path / f"case{n}")))
    with capsys.disabled():
        print("\n\npower cut after a kill at each crash point, then restart")
        for op, point, lost in rows:
            print(f"{op:<10} {point:<26} {'; '.join(lost) or 'nothing lost'}")
    assert not [r for r in rows if r[2]], rows


# -- at random points while a client works -----------------------------------------------------

# 8 cuts in the suite: each cut reloads the whole in-memory file system, so a cut takes
# longer as the session grows (13 s for the first, ~55 s for the twentieth here);
# BRAID_POWERCUT_CUTS=20 (or more) for a longer run.
CUTS = int(os.environ.get("BRAID_POWERCUT_CUTS", "8"))


def client(srv: CutServer, sid: str, home: Path, rng: random.Random, tag: str,
           seen: Seen) -> None:
    """Turns, uploads, imports and merges until the server dies, noting each completion
    seen (a merge: the turn whose sub-agent wrote the file, merged into the branch)."""
    order = rng.sample(range(5), 5)  # each cut's client starts with another kind
    for k in range(1000):
        name = f"{tag}_{k}.txt"
        content = f"{tag} {k} {rng.random()}\n".encode()
        try:
            op = order[k % 5]
            if op in (0, 1, 4):
                text = f"write {name} {content.decode().strip()}"
                if op == 4:
                    text = f"spawn m{k}: {text}\nmerge fail"
                body = srv.run(sid, text)
                if body["status"] == "COMPLETED":
                    with seen.lock:
                        seen.done[body["run_id"]] = (sid, name, content)
                        seen.merges += op == 4
            elif op == 2:
                status, _ = upload(srv, sid, [(name, content)])
                if status == 200:
                    with seen.lock:
                        seen.done[f"upload:{name}"] = (sid, name, content)
            else:
                (home / "proj" / "p.txt").write_bytes(content)
                status, made = srv.api("POST", "/api/sessions",
                                       {"source": {"path": str(home / "proj")}})
                if status == 201:
                    with seen.lock:
                        seen.sessions.add(made["session_id"])
                        seen.done[f"import:{made['session_id']}"] = \
                            (made["session_id"], "p.txt", content)
        except Exception as e:  # noqa: BLE001 - the server was killed under it: the point
            seen.stopped_by.append(f"{type(e).__name__}: {str(e)[:80]}")
            return


def test_power_cut_at_random_points(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(34)
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    mount, data_dir = on_mount(tmp_path / "fs")
    env = {"BRAID_IMPORT_ROOTS": str(home)}
    seen = Seen()
    rows: list[tuple[int, float, int, list[str]]] = []
    delay, made = 0.0, 0
    try:
        srv = CutServer(data_dir=data_dir, port=free_port(), env=env).start()
        sid = srv.new_session()
        # As a session made long ago would be (on disk by the kernel's writeback), so a
        # server that syncs nothing is seen losing turns, not only its newest session.
        sync_tree(data_dir / "sessions" / sid)
        seen.sessions.add(sid)
        for n in range(CUTS + 1):
            if n:
                srv = CutServer(data_dir=data_dir, port=free_port(), env=env).start()
            lost = lost_in(srv, data_dir, seen)
            if n:
                rows.append((n, delay, made, lost))
            if n == CUTS:
                if sid in seen.sessions:
                    use_session(srv, sid)
                srv.stop()
                break
            if sid not in seen.sessions:  # lost to the cut (a server that does not sync)
                sid = srv.new_session()
                sync_tree(data_dir / "sessions" / sid)
                seen.sessions.add(sid)
            done_before = len(seen.done)
            worker = threading.Thread(target=client, daemon=True,
                                      args=(srv, sid, home, rng, f"c{n}", seen))
            worker.start()
            # A random moment after the first completion (at least one to lose, whatever
            # the machine's speed), inside the operations that follow it.
            deadline = time.monotonic() + 300
            while len(seen.done) == done_before and worker.is_alive() \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            delay = rng.uniform(0.0, 4.0)
            time.sleep(delay)
            srv.stop(signal.SIGKILL)
            worker.join(timeout=60)
            made = len(seen.done) - done_before
            mount.cut()
    finally:
        mount.stop()
    with capsys.disabled():
        print("\n\npower cut at random moments of turns, uploads, imports and merges")
        for n, delay, made, lost in rows:
            print(f"cut {n:>2} {delay:4.1f} s after a completion ({made} seen, client stopped "
                  f"by {seen.stopped_by[n - 1] if n <= len(seen.stopped_by) else '?'}): "
                  f"{'; '.join(lost) or 'nothing lost'}")
    assert not [r for r in rows if r[3]], rows
    assert seen.merges, "no merge was seen done before a cut"
