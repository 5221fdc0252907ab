"""Project instructions (DESIGN §4): the branch's `workdir/AGENTS.md` and the operator's
`BRAID_INSTRUCTIONS` file, each sent as a system message after the base prompt, at most
32 KiB (the rest cut, with a note).

AGENTS.md is read from the branch's committed tree, not from the disk: it is a file of the
branch, so a sibling without it, a revert of the turn that wrote it or a fork changes it
exactly as it changes the code, and a symlink named AGENTS.md (a link in git) is never
followed to a file outside the session. A lookup costs one path walk; the text is decoded
once per blob.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from server.git import lookup
from server.git.workdir.scan import WORKDIR

if TYPE_CHECKING:
    from server.git.session import GitSession

FILE_NAME = "AGENTS.md"
PATH = f"{WORKDIR}/{FILE_NAME}"
MAX_BYTES = 32 * 1024
PROJECT_HEAD = "Project instructions (AGENTS.md):\n"
SERVER_HEAD = "Server instructions:\n"


@dataclass(frozen=True)
class Instructions:
    """What of a branch's instructions is in effect: the system messages' texts, and the
    AGENTS.md blob they came from (None: no AGENTS.md on the branch)."""

    texts: tuple[str, ...] = ()
    blob_oid: str | None = None
    size: int = 0  # of AGENTS.md, in bytes
    cut: bool = False


NONE = Instructions()


def capped(head: str, data: bytes, what: str) -> str:
    """`head` + the text, at most MAX_BYTES of it (cut at a character, with a note)."""
    if len(data) <= MAX_BYTES:
        return head + data.decode("utf-8", "replace")
    text = data[:MAX_BYTES].decode("utf-8", "ignore")
    rest = len(data) - len(text.encode())
    return (head + text + f"\n[{what} was cut at 32 KiB: the remaining {rest:,} bytes "
            "are not shown]")


_TEXTS: dict[str, str] = {}  # a blob's text, by its id: a blob never changes
_KEPT = 256


def project(git: GitSession, commit: pygit2.Commit | None = None) -> Instructions:
    """The branch's AGENTS.md at `commit` (default HEAD), on the session thread. Only a
    regular file counts: a link called AGENTS.md is not followed."""
    try:
        tree = (commit or git.head_commit()).tree
    except (pygit2.GitError, KeyError, ValueError):  # an unborn branch
        return NONE
    entry = lookup.at_path(tree, PATH)
    if not isinstance(entry, pygit2.Blob) or entry.filemode not in (
            pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE):
        return NONE
    oid = str(entry.id)
    text = _TEXTS.get(oid)
    if text is None:
        if len(_TEXTS) >= _KEPT:
            _TEXTS.clear()
        text = _TEXTS[oid] = capped(PROJECT_HEAD, entry.data, FILE_NAME)
    return Instructions((text,), oid, entry.size, entry.size > MAX_BYTES)


_SERVER: dict[Path, tuple[tuple[int, int], str | None]] = {}


def server_text(path: Path | None) -> str | None:
    """The operator's BRAID_INSTRUCTIONS file as its message's text, read again when it
    changes (its mtime and size: an edit takes effect without a restart); a missing or
    empty file sends nothing."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size)
    seen = _SERVER.get(path)
    if seen is not None and seen[0] == key:
        return seen[1]
    try:
        data = path.read_bytes()
    except OSError:
        return None
    text = capped(SERVER_HEAD, data, "the server's instructions") if data.strip() else None
    _SERVER[path] = (key, text)
    return text


def messages_of(project_part: Instructions, server_text: str | None) -> tuple[str, ...]:
    """The instruction messages' texts, in order: the operator's, then the branch's."""
    return ((server_text,) if server_text else ()) + project_part.texts
