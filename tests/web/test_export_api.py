"""Export (DESIGN §4 "Import and export", §5 `export_session`, `POST /api/sessions/{id}/export`)
and "Update from source", against a real server and real repositories checked with the git
CLI: a branch of the source with one commit per kept turn, never touching the source's
working tree, index or HEAD; a folder written three-way, never over the user's changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Server, assert_fsck, git

GIT_USER = ["-c", "user.name=T", "-c", "user.email=t@x"]


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, *GIT_USER, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def make_source(roots: Path) -> Path:
    work = roots / "repo"
    (work / "lib").mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    (work / "a.txt").write_text("one\n")
    (work / "lib" / "util.py").write_text("def f():\n    return 1\n")
    commit_all(work, "v1")
    git(work, "tag", "v1")
    (work / "a.txt").write_text("two\n")
    commit_all(work, "v2")
    (work / "untracked.txt").write_text("the user's own\n")
    (work / "lib" / "util.py").write_text("def f():\n    return 'staged'\n")
    git(work, "add", "lib/util.py")  # a staged change the export must not touch
    return work


def source_state(repo: Path) -> tuple[str, str, str, bytes]:
    return (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"),
            git(repo, "symbolic-ref", "HEAD"), (repo / ".git" / "index").read_bytes())


def changed(repo: Path, commit: str) -> dict[str, str]:
    out = git(repo, "diff-tree", "-r", "--no-commit-id", "--name-status", f"{commit}^", commit)
    return {line.split("\t")[1]: line.split("\t")[0] for line in out.splitlines()}


def turn_files(srv: Server, sid: str, run_id: str) -> dict[str, str]:
    status, body = srv.api("GET", f"/api/turns/{run_id}/files?session_id={sid}")
    assert status == 200, body
    letters = {"added": "A", "modified": "M", "deleted": "D"}
    return {p["path"]: letters[p["status"]] for p in body["paths"]}


@pytest.mark.slow
def test_export_to_branch_replays_kept_turns_and_fast_forwards(srv: Server,
                                                               roots: Path) -> None:
    work = make_source(roots)
    before = source_state(work)
    base = git(work, "rev-parse", "v1").strip()
    status, created = srv.api("POST", "/api/sessions", {
        "source": {"git": str(work), "ref": "v1"}, "title": "Fix the util"})
    assert status == 201, created
    sid = created["session_id"]
    path = srv.session_path(sid)
    t1 = srv.run(sid, "write notes.md hello\nappend a.txt more\nsay added notes")
    t2 = srv.run(sid, "write scratch.txt junk\nappend notes.md junk")
    t3 = srv.run(sid, "write lib/util.py def f():\\n    return 3\nwrite new/x.txt x")
    status, reverted = srv.api("POST", f"/api/turns/{t2['run_id']}/revert", {"session_id": sid})
    assert status == 200, reverted

    status, out = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert status == 200, out
    branch = out["branch"]
    assert branch == f"braid/fix-the-util-{sid[:6]}"
    commits = git(work, "rev-list", "--reverse", f"{base}..{branch}").split()
    assert commits == out["commits"] and len(commits) == 2
    assert git(work, "rev-parse", f"{commits[0]}^").strip() == base
    # Each commit's diff is its turn's diff: the same files, the same contents.
    for commit, run in zip(commits, (t1, t3), strict=True):
        assert changed(work, commit) == turn_files(srv, sid, run["run_id"])
        for rel in changed(work, commit):
            if changed(work, commit)[rel] != "D":
                assert git(work, "show", f"{commit}:{rel}") == \
                    (path / "workdir" / rel).read_text()
        message = git(work, "log", "-1", "--format=%B", commit)
        assert f"Braid-Session: {sid}" in message and f"Braid-Run: {run['run_id']}" in message
    assert git(work, "log", "-1", "--format=%s", commits[0]).strip().startswith("write notes.md")
    assert "added notes" in git(work, "log", "-1", "--format=%b", commits[0])
    # The final tree is the session's workdir.
    assert git(work, "ls-tree", "-r", "--name-only", branch).split() == \
        git(path, "ls-tree", "-r", "--name-only", "HEAD:workdir").split()
    assert source_state(work) == before
    assert_fsck(work)
    assert_fsck(path)

    # Exporting again with nothing new changes nothing; after a fourth turn it fast-forwards.
    status, again = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert (status, again["branch"], again["update"]) == (200, branch, "unchanged")
    srv.run(sid, "append notes.md fourth")
    old_tip = commits[-1]
    status, ff = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert status == 200, ff
    assert (ff["branch"], ff["update"], len(ff["commits"])) == (branch, "fast-forward", 3)
    assert git(work, "merge-base", "--is-ancestor", old_tip, branch) == ""
    assert ff["commits"][:2] == commits
    # The branch moved some other way: the next export does not overwrite it.
    theirs = git(work, *GIT_USER, "commit-tree", f"{branch}^{{tree}}", "-p", branch, "-m",
                 "the user's commit on it").strip()
    git(work, "update-ref", f"refs/heads/{branch}", theirs)
    srv.run(sid, "append notes.md fifth")
    status, other = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert status == 200 and other["branch"] == f"{branch}-2", other
    assert other["update"] == "created" and len(other["commits"]) == 4
    assert git(work, "rev-parse", branch).strip() == theirs
    assert source_state(work) == before
    assert_fsck(work)


@pytest.mark.slow
def test_update_from_source_merges_three_way_and_exports_as_a_merge(srv: Server,
                                                                     roots: Path) -> None:
    work = roots / "repo"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "a.txt").write_text("1\n2\n3\n4\n5\n6\n7\n8\n")
    (work / "b.txt").write_text("b\n")
    first = commit_all(work, "first")
    status, created = srv.api("POST", "/api/sessions", {"source": {"git": str(work),
                                                                  "ref": "main"}})
    sid = created["session_id"]
    path = srv.session_path(sid)
    srv.run(sid, "write b.txt session b\nwrite c.txt c")
    # Nothing new in the source: nothing to do.
    status, same = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200 and same["changed"] is False, same
    (work / "a.txt").write_text("1\n2\n3\n4\n5\n6\n7\nEIGHT\n")
    (work / "b.txt").write_text("source b\n")
    (work / "d.txt").write_text("d\n")
    moved = commit_all(work, "source moved on")
    status, up = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200, up
    assert up["changed"] and up["base_commit"] == moved
    assert up["conflicts"] == [{"path": "b.txt", "ours": "modified", "theirs": "modified"}]
    assert sorted(up["updated_paths"]) == ["a.txt", "d.txt"]
    assert (path / "workdir" / "a.txt").read_text().endswith("EIGHT\n")
    assert (path / "workdir" / "b.txt").read_text() == "session b\n"  # ours kept
    assert git(path, "log", "-1", "--format=%s%n%b").startswith("Update from source")
    assert "Braid-Kind: user-edit" in git(path, "log", "-1", "--format=%B")
    meta = json.loads((path / "session.json").read_text())
    assert meta["source"]["base_commit"] == moved
    assert git(path, "status", "--porcelain") == ""

    status, out = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert status == 200, out
    tip = out["branch"]
    parents = git(work, "log", "-1", "--format=%P", tip).split()
    assert len(parents) == 2 and parents[1] == moved  # the update is a merge of the source
    assert git(work, "rev-parse", f"{out['commits'][0]}^").strip() == first
    assert git(work, "show", f"{tip}:a.txt").endswith("EIGHT\n")
    # The branch merges into the user's main without conflicts.
    assert git(work, "merge-base", "--is-ancestor", moved, tip) == ""
    assert_fsck(work)


def make_folder(roots: Path) -> Path:
    src = roots / "folder"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    (src / "b.txt").write_text("b\n")
    (src / "c.txt").write_text("c\n")
    return src


@pytest.mark.slow
def test_export_to_folder_never_overwrites_the_users_changes(srv: Server, roots: Path) -> None:
    src = make_folder(roots)
    status, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    sid = created["session_id"]
    srv.run(sid, "write a.txt session a\nwrite b.txt session b\nwrite new.txt new\ndelete c.txt")
    (src / "b.txt").write_text("the user's b\n")  # changed there since the import
    status, out = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "folder"})
    assert status == 200, out
    assert out["conflicts"] == [{"path": "b.txt", "ours": "modified", "theirs": "modified"}]
    assert out["written"] == ["a.txt", "new.txt"] and out["deleted"] == ["c.txt"]
    assert (src / "b.txt").read_text() == "the user's b\n"
    assert (src / "a.txt").read_text() == "session a\n"
    assert (src / "new.txt").read_text() == "new\n" and not (src / "c.txt").exists()
    # Again, after another turn: only what changed since is written; b.txt still refused.
    srv.run(sid, "append a.txt more")
    status, again = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "folder"})
    assert (again["written"], again["conflicts"][0]["path"]) == (["a.txt"], "b.txt"), again
    (src / "new.txt").write_text("the user's new\n")
    srv.run(sid, "append new.txt from session")
    status, forced = srv.api("POST", f"/api/sessions/{sid}/export",
                             {"to": "folder", "force": True})
    assert sorted(forced["written"]) == ["b.txt", "new.txt"] and forced["conflicts"] == []
    assert (src / "b.txt").read_text() == "session b\n"
    # A new, empty folder gets every file.
    fresh = roots / "fresh"
    status, full = srv.api("POST", f"/api/sessions/{sid}/export",
                           {"to": "folder", "path": str(fresh)})
    assert status == 200 and sorted(full["written"]) == ["a.txt", "b.txt", "new.txt"], full
    assert_fsck(srv.session_path(sid))


def test_update_from_a_folder_source(srv: Server, roots: Path) -> None:
    src = make_folder(roots)
    _, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    sid = created["session_id"]
    path = srv.session_path(sid)
    srv.run(sid, "write a.txt session a")
    (src / "b.txt").write_text("b from the user\n")
    (src / "c.txt").unlink()
    (src / "new.txt").write_text("new\n")
    (src / "a.txt").write_text("a from the user\n")
    status, up = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200, up
    assert up["updated_paths"] == ["b.txt", "c.txt", "new.txt"]
    assert [c["path"] for c in up["conflicts"]] == ["a.txt"]
    files = {p.name: p.read_text() for p in (path / "workdir").iterdir()}
    assert files == {"a.txt": "session a\n", "b.txt": "b from the user\n", "new.txt": "new\n"}
    assert git(path, "status", "--porcelain") == ""
    # Brought in once: a second update finds nothing new.
    status, again = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert again["changed"] is False, again
    assert_fsck(path)


@pytest.mark.parametrize("folder_in", ["session", "source"])
def test_update_keeps_a_file_and_a_folder_of_one_name(srv: Server, roots: Path,
                                                      folder_in: str) -> None:
    """The session made `p` a file where the source made it a folder, or the reverse: the
    clash is listed and neither side is lost (the source's is set aside as `p~source`)."""
    src = make_folder(roots)
    _, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    sid = created["session_id"]
    path = srv.session_path(sid)
    if folder_in == "session":
        srv.run(sid, "write p/q.txt session q")
        (src / "p").write_text("source p\n")
    else:
        srv.run(sid, "write p session p")
        (src / "p").mkdir()
        (src / "p" / "q.txt").write_text("source q\n")
    status, up = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200, up
    ours, theirs = ("folder", "modified") if folder_in == "session" else ("modified", "folder")
    assert up["conflicts"] == [{"path": "p", "ours": ours, "theirs": theirs}], up
    tracked = set(git(path, "ls-tree", "-r", "--name-only", "HEAD", "workdir/").split())
    if folder_in == "session":
        assert (path / "workdir" / "p" / "q.txt").read_text() == "session q\n"
        assert (path / "workdir" / "p~source").read_text() == "source p\n"
        assert {"workdir/p/q.txt", "workdir/p~source"} <= tracked
    else:
        assert (path / "workdir" / "p").read_text() == "session p\n"
        assert (path / "workdir" / "p~source" / "q.txt").read_text() == "source q\n"
        assert {"workdir/p", "workdir/p~source/q.txt"} <= tracked
    assert git(path, "status", "--porcelain") == ""
    assert_fsck(path)


def test_export_errors(srv: Server, roots: Path, tmp_path: Path) -> None:
    src = make_folder(roots)
    _, created = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    sid = created["session_id"]
    plain = srv.new_session()
    cases = [
        (sid, {"to": "branch"}, 400, "needs a session imported from a git"),
        (sid, {"to": "zip"}, 400, "to must be"),
        (sid, {"to": "folder", "path": str(tmp_path / "outside")}, 403, "BRAID_IMPORT_ROOTS"),
        (sid, {"to": "folder", "path": str(src / "a.txt")}, 400, "is a file"),
        (sid, {"to": "folder", "force": "maybe"}, 400, "force must be"),
        (plain, {"to": "folder"}, 400, "path is required"),
        ("0" * 32, {"to": "folder"}, 404, "no session"),
    ]
    for session_id, params, code, words in cases:
        status, body = srv.api("POST", f"/api/sessions/{session_id}/export", params)
        assert status == code and words in body["error"]["message"], (params, body)
    assert not (tmp_path / "outside").exists()
    # The same through the socket action.
    ws = srv.socket(sid)
    try:
        reply = ws.call("export_session", to="folder", path=str(roots / "copy"))
        assert reply["type"] == "result", reply
        assert sorted(reply["data"]["written"]) == ["a.txt", "b.txt", "c.txt"]
        reply = ws.call("export_session", to="branch")
        assert reply["type"] == "error" and reply["error"]["code"] == "bad_request"
    finally:
        ws.close()


@pytest.mark.slow
def test_a_sub_agent_merge_exports_as_a_merge_commit(srv: Server, roots: Path) -> None:
    work = roots / "repo"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "base.txt").write_text("base\n")
    base = commit_all(work, "base")
    _, created = srv.api("POST", "/api/sessions", {"source": {"git": str(work)}})
    sid = created["session_id"]
    turn = srv.run(sid, "write main.txt main")
    branches = []
    for label in ("red", "blue"):
        status, child = srv.api("POST", f"/api/sessions/{sid}/sub_agents", {
            "parent_turn_id": turn["run_id"], "prompt": f"write {label}.txt {label}",
            "label": label})
        assert status == 200, child
        branches.append(child["branch"])
    status, merged = srv.api("POST", f"/api/sessions/{sid}/merge",
                             {"branches": branches, "message": "merge both"})
    assert status == 200, merged
    status, out = srv.api("POST", f"/api/sessions/{sid}/export", {"to": "branch"})
    assert status == 200, out
    tip = out["branch"]
    first_parent = git(work, "rev-list", "--first-parent", "--reverse", f"{base}..{tip}").split()
    assert first_parent == out["commits"] and len(first_parent) == 2
    main_commit, merge = first_parent
    parents = git(work, "log", "-1", "--format=%P", merge).split()
    assert len(parents) == 3 and parents[0] == main_commit
    for parent, label in zip(parents[1:], ("red", "blue"), strict=True):
        assert changed(work, parent) == {f"{label}.txt": "A"}  # the sub-agent's own turn
        assert git(work, "rev-parse", f"{parent}^").strip() == main_commit
    assert sorted(git(work, "ls-tree", "--name-only", tip).split()) == [
        "base.txt", "blue.txt", "main.txt", "red.txt"]
    assert "merge both" in git(work, "log", "-1", "--format=%B", merge)
    assert_fsck(work)


def test_an_update_that_brings_nothing_new_makes_no_commit(srv: Server, roots: Path) -> None:
    src = roots / "same-change"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    status, body = srv.api("POST", "/api/sessions", {"source": {"path": str(src)}})
    assert status == 201, body
    sid, path = body["session_id"], srv.session_path(body["session_id"])
    # The session and the source make the same change: the update finds nothing to bring,
    # makes no commit, and moves the source base on.
    srv.run(sid, "write a.txt both\nsay done")
    (src / "a.txt").write_text("both\n")
    head = git(path, "rev-parse", "HEAD")
    status, up = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200 and up["changed"] is False and up["commit_id"] is None, up
    assert git(path, "rev-parse", "HEAD") == head
    assert git(path, "rev-parse", "refs/braid/source-base^{tree}") == \
        git(path, "rev-parse", "HEAD:workdir")
    # A later change of the source still comes in, three-way from that base.
    (src / "b.txt").write_text("b\n")
    status, up = srv.api("POST", f"/api/sessions/{sid}/update_from_source", {})
    assert status == 200 and up["changed"] is True and up["updated_paths"] == ["b.txt"], up
    assert (path / "workdir" / "a.txt").read_text() == "both\n"
    assert git(path, "status", "--porcelain") == ""
