"""Kill -9 at every named crash point of every multi-step operation, restart, and check the
invariants (DESIGN §4 "Atomic operations"): `git fsck --strict` clean, every commit announced
before the kill still reachable, the operation done with its own commit or not at all,
`git status` clean, the session usable (a new turn, a revert, a continue), seqs unique.

One template session is built once; each case copies it, starts a server armed with
`BRAID_CRASH_AT`, starts the operation over the socket, waits for the SIGKILL, restarts and
checks. The table of points × operations is printed at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, assert_fsck, free_port, git
from server.base.crash import POINTS


@dataclass
class Template:
    data_dir: Path
    sid: str
    t1: str  # a completed turn (parent of the sub-agent and the sibling run)
    t2: str  # a turn to revert
    t3: str  # a reverted turn, to unrevert
    sub_branch: str
    sibling: str  # run/<id>


def kind_of(repo: Path, rev: str) -> str:
    return git(repo, "log", "-1", "--format=%(trailers:key=Braid-Kind,valueonly)", rev).strip()


def build_template(root: Path) -> Template:
    root.mkdir(parents=True)
    srv = Server(data_dir=root / "data", port=free_port()).start()
    try:
        sid = srv.new_session()
        t1 = srv.run(sid, "write a.txt one\nwrite sub/b.txt two")["run_id"]
        t2 = srv.run(sid, "write c.txt three")["run_id"]
        t3 = srv.run(sid, "write d.txt four")["run_id"]
        status, _ = srv.api("POST", f"/api/turns/{t3}/revert", {"session_id": sid})
        assert status == 200
        status, sub = srv.api("POST", f"/api/sessions/{sid}/sub_agents",
                              {"parent_turn_id": t1, "prompt": "write e.txt five"})
        assert status == 200, sub
        status, sibling = srv.api("POST", f"/api/runs/{t1}/continue",
                                  {"session_id": sid, "input": "write f.txt six", "fork": True})
        assert status == 200, sibling
        ws = srv.socket(sid)
        assert ws.call("checkout", ref="main")["type"] == "result"
        ws.close()
        return Template(srv.data_dir, sid, t1, t2, t3, sub["branch"],
                        f"run/{sibling['run_id']}")
    finally:
        srv.stop()


# Each operation: the socket action that starts it, and a check of "done or not at all"
# (returns "done" or "undone").
Check = Callable[[Template, Path, str, Server], str]


def check_checkpoint(t: Template, repo: Path, tip: str, srv: Server) -> str:
    runs = srv.api("GET", f"/api/sessions/{t.sid}")[1]["runs"]
    live = [r for r in runs if r["run_id"] not in (t.t1, t.t2, t.t3)
            and r["branch"] == "main" and r["status"] not in ("COMPLETED",)]
    assert live and all(r["status"] == "INTERRUPTED" for r in live), runs
    assert kind_of(repo, "HEAD") == "turn"
    return "done"


def _kinds_since(repo: Path, tip: str) -> list[str]:
    out = git(repo, "log", "--format=%(trailers:key=Braid-Kind,valueonly)", f"{tip}..main")
    return [k for k in out.split() if k]


def check_revert(kind: str, turn: str) -> Check:
    def check(t: Template, repo: Path, tip: str, srv: Server) -> str:
        turn_id = getattr(t, turn)
        record = git(repo, "show", f"main:{_run_file(repo, turn_id)}")
        reverted = '"reverted": true' in record
        kinds = _kinds_since(repo, tip)
        done = kind in kinds
        assert done == (reverted == (kind == "revert")), (kinds, record)
        if not done:
            assert git(repo, "rev-parse", "main").strip() == tip
        name = "c.txt" if turn == "t2" else "d.txt"
        assert (repo / "workdir" / name).exists() == (not reverted)
        return "done" if done else "undone"

    return check


def check_rewind(t: Template, repo: Path, tip: str, srv: Server) -> str:
    """A files-only rewind to before t1: done (one `revert` commit, t1's and t2's files gone,
    its note in history/) or not at all (the branch and the files as they were)."""
    kinds = _kinds_since(repo, tip)
    gone = not (repo / "workdir/a.txt").exists()
    assert gone == (not (repo / "workdir/c.txt").exists())
    if kinds:
        assert kinds == ["revert"] and gone, kinds
        return "done"
    assert git(repo, "rev-parse", "main").strip() == tip and not gone
    return "undone"


def _run_file(repo: Path, run_id: str) -> str:
    names = git(repo, "ls-tree", "-r", "--name-only", "main", "runs/").split()
    return next(n for n in names if n.endswith(f"{run_id}.json"))


def check_merge(t: Template, repo: Path, tip: str, srv: Server) -> str:
    kinds = _kinds_since(repo, tip)
    if "merge" in kinds:
        merges = git(repo, "log", "--merges", "--format=%H", f"{tip}..main").split()
        assert len(merges) == 1
        assert (repo / "workdir/e.txt").read_text() == "five\n"
        return "done"
    assert git(repo, "rev-parse", "main").strip() == tip, kinds
    assert not (repo / "workdir/e.txt").exists()
    return "undone"


def check_fork(t: Template, repo: Path, tip: str, srv: Server) -> str:
    folders = [p for p in (srv.data_dir / "sessions").iterdir()]
    assert all((p / "session.json").exists() for p in folders), folders
    listed = srv.api("GET", "/api/sessions")[1]["sessions"]
    assert len(listed) == len(folders)
    if len(folders) == 1:
        return "undone"
    fork = next(p for p in folders if p.name != t.sid)
    assert kind_of(fork, "HEAD") == "fork"
    check_repo(fork)
    return "done"


def check_subagent(t: Template, repo: Path, tip: str, srv: Server) -> str:
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not any((repo / "_worktrees").glob("*")) if (repo / "_worktrees").exists() else True
    if "sub-agent" in _kinds_since(repo, tip):
        return "done"
    assert git(repo, "rev-parse", "main").strip() == tip
    return "undone"


def check_checkout(t: Template, repo: Path, tip: str, srv: Server) -> str:
    head = git(repo, "symbolic-ref", "--short", "HEAD").strip()
    assert head in ("main", t.sibling)
    assert (repo / "workdir/f.txt").exists() == (head == t.sibling)
    return "done" if head == t.sibling else "undone"


# The model's own sub-agents (agent/orchestrate.py): sa ends at once, sb takes a while (so
# a kill after one child finished finds the other running), then their merge.
SPAWN_TEXT = ("spawn sa: write sa.txt A\nspawn sb: slow 40\\nwrite sb.txt B\\nsay b b b b b b b b"
              "\nmerge fail")


def check_spawn(t: Template, repo: Path, tip: str, srv: Server) -> str:
    """The parent is INTERRUPTED; resumed, it ends with both children's files merged, no
    child that had finished runs again, and no child runs twice."""
    runs = srv.api("GET", f"/api/sessions/{t.sid}")[1]["runs"]
    parent = next(r for r in runs if r["branch"] == "main"
                  and r["run_id"] not in (t.t1, t.t2, t.t3) and r["status"] != "COMPLETED")
    assert parent["status"] == "INTERRUPTED", runs
    prefix = f"sub_{parent['run_id'][:10]}_"
    children = [r for r in runs if str(r["branch"]).startswith(prefix)]
    assert all(r["status"] in ("COMPLETED", "INTERRUPTED") for r in children), children
    finished = {r["branch"]: git(repo, "rev-parse", r["branch"]).strip() for r in children
                if r["status"] == "COMPLETED"}
    status, body = srv.api("POST", f"/api/runs/{parent['run_id']}/continue",
                           {"session_id": t.sid})
    assert status == 200 and body["status"] == "COMPLETED", body
    assert not body["forked"], {k: body[k] for k in ("forked", "branch", "message_index")}
    assert body["messages"][-1]["content"] == "merged: A; b b b b b b b b" or \
        body["messages"][-1]["content"].startswith("merged: "), body["messages"][-1]
    assert (repo / "workdir/sa.txt").read_text() == "A\n"
    assert (repo / "workdir/sb.txt").read_text() == "B\n"
    merges = git(repo, "log", "--merges", "--format=%H", f"{tip}..main").split()
    assert len(merges) == 1
    for branch, before in finished.items():  # a finished child never runs again
        assert git(repo, "rev-parse", branch).strip() == before
    branches = [b for b in git(repo, "for-each-ref", "--format=%(refname:short)",
                               "refs/heads").split() if b.startswith(prefix)]
    assert len(branches) == 2, branches
    for branch in branches:  # one run per child, resumed in place if it was interrupted
        records = git(repo, "ls-tree", "-r", "--name-only", branch, "runs/").split()
        assert len(records) == 1, (branch, records)
    return "resumed"


OPERATIONS: dict[str, tuple[Callable[[Template], dict[str, Any]], Check]] = {
    "spawn": (lambda t: {"action": "send_message", "text": SPAWN_TEXT}, check_spawn),
    "merge-tool": (lambda t: {"action": "send_message", "text": SPAWN_TEXT}, check_spawn),
    "checkpoint": (lambda t: {"action": "send_message",
                              "text": "write g.txt seven\nbatch\nwrite h.txt eight"},
                   check_checkpoint),
    "revert": (lambda t: {"action": "revert_turn", "turn_id": t.t2},
               check_revert("revert", "t2")),
    "unrevert": (lambda t: {"action": "unrevert_turn", "turn_id": t.t3},
                 check_revert("unrevert", "t3")),
    "merge": (lambda t: {"action": "merge_branches", "branches": [t.sub_branch],
                         "message": "merge it"}, check_merge),
    "fork": (lambda t: {"action": "fork_session"}, check_fork),
    "sub-agent": (lambda t: {"action": "spawn_sub_agent", "parent_turn_id": t.t1,
                             "prompt": "write i.txt nine"}, check_subagent),
    "checkout": (lambda t: {"action": "checkout", "ref": t.sibling}, check_checkout),
    "rewind": (lambda t: {"action": "rewind_files", "run_id": t.t1, "message_index": 0},
               check_rewind),
}
# Recovery itself: killed while recovering what the first kill (at this point) left.
RECOVERED = {"recovery.after_rollback": ("revert", "revert.after_files"),
             "recovery.after_commit": ("checkpoint", "checkpoint.before_commit")}


# Operations whose points are killed in a file of their own (the same checks and table).
ELSEWHERE = {"export": "test_export_killed.py", "upload": "test_crash_upload.py",
             "import": "test_import_crash.py", "update": "test_import_crash.py",
             "queue": "test_queue_killed.py", "compaction": "test_compaction_killed.py"}


def cases() -> Iterator[tuple[str, str]]:
    only = os.environ.get("BRAID_FAULT_ONLY")  # while developing: one operation's points
    for op, points in POINTS.items():
        if op in ELSEWHERE:
            assert (Path(__file__).parent / ELSEWHERE[op]).exists()
            continue
        for point in points:
            if not only or only in (op, point):
                yield op, point


def check_repo(repo: Path) -> None:
    assert_fsck(repo)
    assert git(repo, "status", "--porcelain") == ""
    # history/ and runs/ stay off disk (skip-worktree), and recovery committed or set aside
    # every file a killed turn left pending.
    assert not (repo / "history").exists() and not (repo / "runs").exists()
    assert {line[0] for line in git(repo, "ls-files", "-t", "history", "runs").splitlines()} \
        <= {"S"}
    pending = repo / ".git" / "braid-pending"
    assert not [p for p in pending.rglob("*") if p.is_file()], list(pending.rglob("*"))
    for branch in git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split():
        names = git(repo, "ls-tree", "-r", "--name-only", branch, "history/").split()
        seqs = [n.rsplit("/", 1)[-1].split("-", 1)[0] for n in names]
        assert all(s.isdigit() for s in seqs), names
        assert len(seqs) == len(set(seqs)), f"seq given twice on {branch}: {sorted(seqs)}"


def crash_at(data_dir: Path, point: str, frame: dict[str, Any] | None, sid: str) -> list[str]:
    """Start a server armed at `point`, start the operation, wait for the kill. Returns the
    commit ids the server announced before it died."""
    srv = Server(data_dir=data_dir, port=free_port(), env={"BRAID_CRASH_AT": point})
    announced: list[str] = []
    if frame is None:  # the point is in start-up recovery
        with pytest.raises(RuntimeError, match="server exited"):
            srv.start()
        assert srv.proc is not None and srv.proc.returncode == -signal.SIGKILL
        return announced
    srv.start()
    ws = srv.socket(sid)
    params = {k: v for k, v in frame.items() if k != "action"}
    ws.send(frame["action"], **params)
    try:
        while True:
            got = ws.next(timeout=30)
            if got.get("event") == "checkpoint":
                announced.append(got["data"]["commit_id"])
    except Exception:  # noqa: BLE001 - the socket dies with the server
        pass
    assert srv.proc is not None
    assert srv.proc.wait(timeout=30) == -signal.SIGKILL, f"{point} was never reached"
    return announced


def use_session(srv: Server, sid: str) -> None:
    """A new turn, a revert of it and a continue all work after the restart."""
    run = srv.run(sid, "write z.txt zed")
    assert run["status"] == "COMPLETED", run
    status, body = srv.api("POST", f"/api/turns/{run['run_id']}/revert", {"session_id": sid})
    assert status == 200, body
    status, body = srv.api("POST", f"/api/runs/{run['run_id']}/continue",
                           {"session_id": sid, "input": "say again"})
    assert status == 200 and body["status"] == "COMPLETED", body


def run_case(template: Template, op: str, point: str, work: Path) -> str:
    data_dir = work / "data"
    work.mkdir(parents=True)
    shutil.copytree(template.data_dir, data_dir, symlinks=True)
    repo = data_dir / "sessions" / template.sid
    before = git(repo, "for-each-ref", "--format=%(objectname)").split()
    tip = git(repo, "rev-parse", "main").strip()
    frame_op, first_point = RECOVERED.get(point, (op, point))
    frame = OPERATIONS[frame_op][0](template)
    announced = crash_at(data_dir, first_point, frame, template.sid)
    if point in RECOVERED:
        crash_at(data_dir, point, None, template.sid)
    srv = Server(data_dir=data_dir, port=free_port()).start()
    try:
        reachable = set(git(repo, "rev-list", "--all").split())
        missing = [c for c in before + announced if c not in reachable]
        assert not missing, f"commits lost: {missing}"
        check_repo(repo)
        outcome = OPERATIONS[frame_op][1](template, repo, tip, srv)
        if git(repo, "symbolic-ref", "--short", "HEAD").strip() != "main":
            ws = srv.socket(template.sid)
            assert ws.call("checkout", ref="main")["type"] == "result"
            ws.close()
        use_session(srv, template.sid)
        check_repo(repo)
        return outcome
    finally:
        srv.stop()


def test_kill_at_every_point_of_every_operation(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    template = build_template(tmp_path / "template")
    rows: list[tuple[str, str, str]] = []
    failures: list[str] = []
    for n, (op, point) in enumerate(cases()):
        try:
            outcome = run_case(template, op, point, tmp_path / f"case{n}")
            rows.append((op, point, f"ok ({outcome})"))
        except (AssertionError, RuntimeError, subprocess.SubprocessError) as e:
            rows.append((op, point, "FAIL"))
            failures.append(f"{op} @ {point}: {e}")
    with capsys.disabled():
        print("\n\nkill -9 at each crash point, then restart (invariants checked)")
        print(f"{'operation':<12} {'crash point':<28} result")
        for op, point, result in rows:
            print(f"{op:<12} {point:<28} {result}")
        print()
    assert not failures, "\n".join(failures)
