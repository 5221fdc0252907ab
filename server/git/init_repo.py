"""`init_repository`: a new repository as pygit2 makes it, without the one pygit2 leaks.

`pygit2.init_repository` (1.18 to 1.21) makes the repository with libgit2's
`git_repository_init_ext`, then returns another one opened by path and never frees the first:
its config snapshot, odb and refdb (~10 KB of C heap) stay for the life of the process, for
every session made, forked or imported (issue 11: RSS back to the start when quiet). This
makes it the same way, with the same options, and frees it.

`init_unsynced`: the same repository's files written plainly, for a folder synced whole
afterwards (a fork: libgit2 syncs each file and folder it makes, one after another).
"""

from __future__ import annotations

import os
from pathlib import Path

from pygit2 import C, ffi
from pygit2.enums import RepositoryInitFlag, RepositoryInitMode
from pygit2.errors import check_error


def init_repository(path: Path, initial_head: str) -> None:
    """`git init` at `path` (made if missing) with `initial_head` as its unborn branch."""
    options = ffi.new("git_repository_init_options *")
    C.git_repository_init_options_init(options, C.GIT_REPOSITORY_INIT_OPTIONS_VERSION)
    options.flags = int(RepositoryInitFlag.MKPATH)
    options.mode = int(RepositoryInitMode.SHARED_UMASK)
    head = ffi.new("char []", initial_head.encode())
    options.initial_head = head
    made = ffi.new("git_repository **")
    check_error(C.git_repository_init_ext(made, os.fsencode(path), options))
    C.git_repository_free(made[0])


# What `git_repository_init_ext` writes that git reads (hooks' samples and `description` are
# for people).
_CONFIG = (b"[core]\n\tbare = false\n\trepositoryformatversion = 0\n\tfilemode = true\n"
           b"\tlogallrefupdates = true\n")


def init_unsynced(path: Path, initial_head: str) -> None:
    """`git init` at `path` (made if missing) with nothing synced: the caller syncs the new
    folder whole before anyone is told of it (fsops.sync_tree)."""
    dot = path / ".git"
    for folder in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (dot / folder).mkdir(parents=True, exist_ok=True)
    (dot / "HEAD").write_bytes(b"ref: refs/heads/%s\n" % initial_head.encode())
    (dot / "config").write_bytes(_CONFIG)
