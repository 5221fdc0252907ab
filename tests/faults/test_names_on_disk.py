"""Issue 21 rows 5, 6 and 15 (the agent's part): one name never bricks a session.

A real server and the demo model. The agent's file tools refuse every path the name rule
(names.py) refuses: a tool error the model reads, the turn goes on, nothing is written.
Names on disk git cannot hold (made by the shell, or by the user in workdir/, a name that is
not UTF-8 too) are left out of the commit and listed as `skipped` in that commit, in the
`checkpoint` event and in the run record; later turns, uploads, forks, sub-agents, merges,
reverts, exports and a restart all work, and `git fsck --strict` stays clean."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, WsClient, assert_fsck, free_port, git, upload
from server.git.commits import SKIPPED_HEAD

ENDS = ("run_completed", "run_error", "run_cancelled")
REPO = "names the repository's .git folder"
LONG = "a" * 300


def turn(srv: Server, ws: WsClient, sid: str, text: str) -> tuple[dict[str, Any], list[Any]]:
    """Run a turn to its end over HTTP; its record and messages, and the `checkpoint` events
    the socket heard for it."""
    done = srv.run(sid, text)
    rid = done["run_id"]
    ws.until(lambda f: f.get("type") == "event" and f.get("event") in ENDS
             and f["data"].get("run_id") == rid)
    events = [f["data"] for f in ws.frames
              if f.get("event") == "checkpoint" and f["data"].get("run_id") == rid]
    return done, events


def skipped_of(events: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [s for e in events for s in e.get("skipped", ())]


def skipped_in(message: str) -> list[dict[str, str]]:
    """The `skipped` list a commit message holds (`commits.commit_message`), or []."""
    out: list[dict[str, str]] = []
    listing = False
    for line in message.splitlines():
        if line.startswith(SKIPPED_HEAD):
            listing = True
        elif listing and line.startswith("  {"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        elif listing:
            listing = line.startswith("  ")
    return out


def commit_skipped(path: Path, commit: str) -> list[dict[str, str]]:
    return skipped_in(git(path, "log", "-1", "--format=%B", commit))


def tree_paths(path: Path, rev: str = "HEAD") -> list[str]:
    return git(path, "ls-tree", "-r", "--name-only", rev).splitlines()


def tool_messages(done: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in done["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("text", [
    "write git~1/x hi", "write GIT~1/x hi", "write .git./x hi", "write .gIt /x hi",
    "write .git::$INDEX_ALLOCATION/x hi", "write .g\u200cit/x hi", f"write {LONG} hi",
    f"write dir/{LONG}/x hi",
])
def test_the_agents_bad_name_is_a_tool_error_and_the_session_goes_on(
        shared_server: Server, text: str) -> None:
    srv = shared_server
    sid = srv.new_session()
    path = srv.session_path(sid)
    done = srv.run(sid, text)
    assert done["status"] == "COMPLETED", done
    (tool,) = tool_messages(done)
    assert tool["is_error"] and "bad file name" in tool["content"], tool
    assert list((path / "workdir").iterdir()) == []  # nothing written
    later = srv.run(sid, "write ok.txt fine")
    assert later["status"] == "COMPLETED", later
    assert git(path, "show", "HEAD:workdir/ok.txt") == "fine\n"
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


SHELL_MADE = [
    ("shell printf z > \"$(printf 'bad\\377.txt')\"", "bad\\xff.txt", "not valid UTF-8"),
    ("shell mkdir -p GIT~1 && echo x > GIT~1/y", "GIT~1/y", REPO),
    ("shell mkdir .Git && echo x > .Git/config", ".Git/config", REPO),
    # git fsck --strict refuses a tree with a symlink named .gitmodules
    ("shell mkdir -p m && ln -s /etc/passwd m/.gitmodules", "m/.gitmodules",
     "a symlink named .gitmodules"),
]


@pytest.mark.slow
def test_names_git_cannot_hold_are_skipped_and_listed_and_the_session_goes_on(
        server_factory: Any, tmp_path: Path, roots: Path) -> None:
    env = {"BRAID_SHELL": "on", "BRAID_IMPORT_ROOTS": str(roots)}
    srv = server_factory(tmp_path / "data", **env)
    sid = srv.new_session()
    path = srv.session_path(sid)
    work = path / "workdir"
    ws = srv.socket(sid)
    for text, shown, reason in SHELL_MADE:
        done, events = turn(srv, ws, sid, f"{text} && echo good > good.txt")
        assert done["status"] == "COMPLETED", done
        entry = {"path": shown, "reason": reason}
        # The event, the commit and the run record say which and why; the model is told.
        assert skipped_of(events) == [entry], events
        batch = next(e for e in events if e.get("skipped"))
        assert commit_skipped(path, batch["commit_id"]) == [entry]
        assert done["skipped"] == [entry]
        (tool,) = tool_messages(done)
        assert shown in tool["content"] and "cannot hold" in tool["content"]
        assert "workdir/good.txt" in tree_paths(path)
        assert_fsck(path)

    # Names the user made in workdir/ by hand: the next turn's first checkpoint lists them;
    # the names listed before are not listed again.
    (work / os.fsdecode(b"mine\xfe.txt")).write_text("m")
    (work / ".GIT").mkdir()
    (work / ".GIT" / "x").write_text("g")
    (work / "user.txt").write_text("u")
    later, events = turn(srv, ws, sid, "write ok.txt fine")
    assert later["status"] == "COMPLETED", later
    mine = [{"path": ".GIT/x", "reason": REPO},
            {"path": "mine\\xfe.txt", "reason": "not valid UTF-8"}]
    assert skipped_of(events) == mine
    assert commit_skipped(path, "HEAD~2") == mine  # the user-edit commit, user.txt in it
    assert git(path, "show", "HEAD~2:workdir/user.txt") == "u"
    assert later["skipped"] == mine
    again, events = turn(srv, ws, sid, "write ok2.txt fine")
    assert again["status"] == "COMPLETED" and skipped_of(events) == []
    ws.close()

    # Everything else goes on: an upload, a fork, a sub-agent and its merge, a revert, an
    # export to a folder.
    status, body = upload(srv, sid, [("up.txt", b"up")])
    assert status == 201, body
    status, forked = srv.api("POST", f"/api/sessions/{sid}/fork")
    assert status == 201, forked
    fork_path = srv.session_path(forked["session_id"])
    assert srv.run(forked["session_id"], "write f.txt f")["status"] == "COMPLETED"
    status, child = srv.api("POST", f"/api/sessions/{sid}/sub_agents", {
        "parent_turn_id": again["run_id"], "prompt": "write sub.txt s\nsay done"})
    assert status == 200 and child["final_text"] == "done", child
    status, merged = srv.api("POST", f"/api/sessions/{sid}/merge",
                             {"branches": [child["branch"]], "message": "merge"})
    assert status == 200, merged
    assert git(path, "show", "HEAD:workdir/sub.txt") == "s\n"
    status, reverted = srv.api("POST", f"/api/turns/{again['run_id']}/revert",
                               {"session_id": sid})
    assert status == 200, reverted
    status, out = srv.api("POST", f"/api/sessions/{sid}/export",
                          {"to": "folder", "path": str(roots / "out")})
    assert status == 200, out
    assert (roots / "out" / "ok.txt").read_text() == "fine\n"
    assert not (roots / "out" / "GIT~1").exists() and not (roots / "out" / ".Git").exists()

    # A restart: the session opens and works; the names are still only on disk.
    srv.stop()
    srv = server_factory(tmp_path / "data", **env)
    final = srv.run(sid, "shell echo again > again.txt")
    assert final["status"] == "COMPLETED", final
    assert git(path, "show", "HEAD:workdir/again.txt") == "again\n"
    listed = tree_paths(path)
    for bad in ("GIT~1/y", ".Git/config", ".GIT/x"):
        assert f"workdir/{bad}" not in listed and (work / bad).exists()
    assert not [p for p in listed if p.startswith(("workdir/bad", "workdir/mine"))]
    for repo in (path, fork_path):
        assert_fsck(repo)
    assert srv.run(forked["session_id"], "write g.txt g")["status"] == "COMPLETED"


@pytest.mark.slow
def test_a_session_holding_such_names_from_before_opens_and_works(server_factory: Any,
                                                                   tmp_path: Path) -> None:
    srv = server_factory(tmp_path / "data")
    sid = srv.new_session()
    path = srv.session_path(sid)
    assert srv.run(sid, "write a.txt one")["status"] == "COMPLETED"
    srv.stop()
    # What an older Braid left: names made on disk that it could never commit.
    work = path / "workdir"
    (work / os.fsdecode(b"old\xff.txt")).write_text("o")
    (work / "git~1").mkdir()
    (work / "git~1" / "x").write_text("x")
    srv = server_factory(tmp_path / "data")
    status, _ = srv.api("GET", f"/api/sessions/{sid}")
    assert status == 200
    ws = srv.socket(sid)
    done, events = turn(srv, ws, sid, "write b.txt two")
    ws.close()
    assert done["status"] == "COMPLETED", done
    assert skipped_of(events) == [{"path": "git~1/x", "reason": REPO},
                                  {"path": "old\\xff.txt", "reason": "not valid UTF-8"}]
    assert git(path, "show", "HEAD:workdir/b.txt") == "two\n"
    assert_fsck(path)


def test_a_turn_killed_with_such_names_on_disk_is_recovered(server_factory: Any,
                                                           tmp_path: Path) -> None:
    """kill -9 at the checkpoint of a turn whose shell made such names: start-up recovery
    commits what the turn left (INTERRUPTED), leaving them out and listing them; the session
    goes on, the interrupted run resumes."""
    data = tmp_path / "data"
    srv = server_factory(data, BRAID_SHELL="on")
    sid = srv.new_session()
    path = srv.session_path(sid)
    srv.stop()
    srv = Server(data_dir=data, port=free_port(),
                 env={"BRAID_SHELL": "on", "BRAID_CRASH_AT": "turn.checkpoint"}).start()
    try:
        ws = srv.socket(sid)
        ws.send("send_message", text="shell mkdir -p GIT~1 && echo x > GIT~1/y && printf z > "
                                     "\"$(printf 'bad\\377.txt')\" && echo k > kept.txt")
        assert srv.proc is not None and srv.proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        srv.stop()
    srv = server_factory(data, BRAID_SHELL="on")
    assert git(path, "show", "HEAD:workdir/kept.txt") == "k\n"
    found = [s for rev in git(path, "rev-list", "HEAD").split()
             for s in commit_skipped(path, rev)]
    assert {"path": "GIT~1/y", "reason": REPO} in found
    assert {"path": "bad\\xff.txt", "reason": "not valid UTF-8"} in found
    assert_fsck(path)
    run_id = git(path, "log", "-1", "--format=%(trailers:key=Braid-Run,valueonly)").strip()
    status, body = srv.api("POST", f"/api/runs/{run_id}/continue",
                           {"session_id": sid, "input": "write after.txt a"})
    assert status == 200 and body["status"] == "COMPLETED", body
    assert srv.run(sid, "shell echo n > n.txt")["status"] == "COMPLETED"
    assert git(path, "show", "HEAD:workdir/n.txt") == "n\n"
    assert_fsck(path)
