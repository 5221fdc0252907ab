"""Issue 21 row 12: the background repack raced object writers. `git repack -d` runs
`git prune-packed`, which removes each fan-out folder (`objects/xx/`) it empties; a writer
that had just made or found that folder failed to create its temporary file there (our
LooseWriter) or to rename libgit2's into it ("failed to rename lockfile"): a turn ended ERROR.

Checkpoints are written as they are in a session (a blob, a tree, a commit on a branch, so
the next repack packs them and empties folders) by our LooseWriter and by libgit2, while the
packer's own commands run in a loop. On the old code this loop failed within seconds (see
issue 21: the old code failed here within 2 s, after 8 to 19 checkpoints, three runs in three;
a loop of libgit2 writes alone failed once in 4k checkpoints against `git repack -d`).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pygit2
import pytest

from conftest import assert_fsck, git
from server.git import packing
from server.git.init_repo import init_repository
from server.git.loose import LooseWriter

SECONDS = float(os.environ.get("BRAID_RACE_SECONDS", "15"))


def _loose_commits(repo: Path, stop: threading.Event, errors: list[str]) -> int:
    writer = LooseWriter(repo / ".git" / "objects", pool=None)
    ref = repo / ".git" / "refs" / "heads" / "loose"
    parent = b""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            blob = writer.write(b"blob", b"loose %d\n" % n)
            tree = writer.write(b"tree", b"100644 f.txt\0" + blob)
            commit = writer.write(b"commit", b"tree %s\n%sauthor a <a@b> 0 +0000\n"
                                  b"committer a <a@b> 0 +0000\n\nc%d\n"
                                  % (tree.hex().encode(), parent, n))
            parent = b"parent %s\n" % commit.hex().encode()
            tmp = repo / ".git" / "loose.new"
            tmp.write_text(commit.hex() + "\n")
            os.replace(tmp, ref)  # reachable: the next repack packs it, emptying folders
        except OSError as e:
            errors.append(f"LooseWriter: {e!r}")
    return n


def _libgit2_commits(repo: Path, stop: threading.Event, errors: list[str]) -> int:
    r = pygit2.Repository(str(repo))
    sig = pygit2.Signature("a", "a@b", 0, 0)
    parents: list[pygit2.Oid] = []
    n = 0
    while not stop.is_set():
        n += 1
        try:
            builder = r.TreeBuilder()
            builder.insert("g.txt", r.create_blob(b"libgit2 %d\n" % n), pygit2.GIT_FILEMODE_BLOB)
            oid = r.create_commit("refs/heads/lg2", sig, sig, f"c{n}", builder.write(), parents)
            parents = [oid]
        except (OSError, pygit2.GitError) as e:
            errors.append(f"libgit2: {e!r}")
        # libgit2 alone writes ~1,500 commits a second: unthrottled, each `repack -a` has a
        # history ten times longer to pack and the loop sees few repacks (a turn commits far
        # less often than this).
        time.sleep(0.002)
    return n


@pytest.mark.slow
def test_writes_survive_repacks_running_alongside(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(packing, "LOOSE_LIMIT", 30)  # a repack as often as it can run
    repo = tmp_path / "s"
    repo.mkdir()
    init_repository(repo, "main")
    stop = threading.Event()
    errors: list[str] = []
    counts: dict[str, int] = {}
    repacks = 0

    def repacker() -> None:
        nonlocal repacks
        while not stop.is_set():
            try:
                packing.pack_now(repo)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"repack: {e!r} {getattr(e, 'stderr', b'')!r}")
            repacks += 1

    threads = [threading.Thread(target=repacker),
               threading.Thread(target=lambda: counts.__setitem__(
                   "loose", _loose_commits(repo, stop, errors))),
               threading.Thread(target=lambda: counts.__setitem__(
                   "libgit2", _libgit2_commits(repo, stop, errors)))]
    for t in threads:
        t.start()
    # At least SECONDS, and at least 25 repacks (a loaded machine repacks slowly), at most 90 s.
    start = time.monotonic()
    while not errors:
        elapsed = time.monotonic() - start
        if elapsed > 90 or (elapsed > SECONDS and repacks >= 25):
            break
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    print(f"\n{counts} checkpoints, {repacks} repacks in {time.monotonic() - start:.0f} s, "
          f"errors: {errors[:5]}")
    assert not errors, errors[:5]
    assert repacks > 20 and packing.pack_count(repo / ".git") >= 1
    assert_fsck(repo)
    # Every checkpoint is whole: both branches' whole history reads back.
    for branch, name, n in (("loose", "f.txt", counts["loose"]),
                            ("lg2", "g.txt", counts["libgit2"])):
        kind = branch if branch == "loose" else "libgit2"
        assert git(repo, "show", f"{branch}:{name}") == f"{kind} {n}\n"
        assert int(git(repo, "rev-list", "--count", branch)) == n
