"""The one name rule (DESIGN §4 "Boundaries"): which paths Braid may write, commit, upload,
import or export. Every door calls `check_path` (refuse: `bad_request`, nothing written) or
`why_not` (a name found on disk: leave it out of the commit and list it in `skipped`).

The rule is git's own `verify_path` with both its NTFS and its HFS protections switched on
(git turns on only the one for the machine it runs on; a session may be exported to either),
so no tree Braid writes can later be refused by git or libgit2, or plant a `.git` that some
file system takes for the repository: no part is `.git` in any case or spelling git treats as
the same (`git~1`, `.git.`, `.git `, `.git::$INDEX_ALLOCATION`, HFS-ignorable characters), no
`.` or `..` part, no empty part, no NUL, each part at most 255 bytes, valid UTF-8.

A name on disk that is not valid UTF-8 reaches Python as lone surrogates (`surrogateescape`);
`shown` prints it escaped.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from server.base.errors import BadRequest
from server.base.records import Skipped

MAX_PART_BYTES = 255
# Code points HFS+ ignores when it compares names (git's next_hfs_char), so ".g\u200cit" is
# ".git" there.
_HFS_IGNORED = frozenset(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])


class BadName(BadRequest):
    """A path that breaks the name rule; `reason` says which part of it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"bad file name '{shown(path)}': {reason}",
                         {"path": shown(path), "reason": reason})
        self.path = path
        self.reason = reason


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """The name with its undecodable bytes escaped (`bad\\xff.txt`), safe to print."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _is_ntfs_dotgit(part: str) -> bool:
    """git's is_ntfs_dotgit: `.git` or its 8.3 short name `git~1`, in any case, followed only
    by dots and spaces (NTFS drops them), up to the end or an alternate stream (`:`)."""
    low = part.lower()
    if low.startswith(".git"):
        rest = part[4:]
    elif low.startswith("git~1"):
        rest = part[5:]
    else:
        return False
    rest = rest.split(":", 1)[0]
    return all(c in ". " for c in rest)


def _is_hfs_dotgit(part: str) -> bool:
    """git's is_hfs_dotgit: `.git` in any ASCII case once HFS+'s ignored code points go."""
    kept = "".join(c for c in part if ord(c) not in _HFS_IGNORED)
    return kept.lower() == ".git"


def _is_dotgitmodules(part: str) -> bool:
    """A symlink named `.gitmodules` (or its NTFS spellings) is refused as git refuses it."""
    kept = "".join(c for c in part if ord(c) not in _HFS_IGNORED).lower()
    kept = kept.split(":", 1)[0].rstrip(". ")
    return kept == ".gitmodules" or (kept.startswith("gitmod~") and kept[7:].isdigit())


def part_problem(part: str, *, symlink: bool = False) -> str | None:
    """Why one path component cannot be a name git holds, or None."""
    if part in ("", ".", ".."):
        return f"'{part}' is not a file name" if part else "empty part"
    if "\x00" in part:
        return "contains a NUL byte"
    if not is_utf8(part):
        return "not valid UTF-8"
    if len(part.encode("utf-8")) > MAX_PART_BYTES:
        return f"a part longer than {MAX_PART_BYTES} bytes"
    # After a backslash too: NTFS takes it for a separator, so `a\\.git` is a repository there.
    if any(_is_ntfs_dotgit(p) for p in part.split("\\")) or _is_hfs_dotgit(part):
        return "names the repository's .git folder"
    if symlink and _is_dotgitmodules(part):
        return "a symlink named .gitmodules"
    return None


def _plain(path: str) -> bool:
    """ASCII with no NUL, `\\`, `~` nor `git` in any case: none of the `.git` spellings can
    be in it (the HFS-ignored code points are not ASCII), so only the part checks are left."""
    return path.isascii() and "\x00" not in path and "\\" not in path and "~" not in path \
        and "git" not in path.lower()


def why_not(path: object, *, symlink: bool = False) -> str | None:
    """Why `path` (relative, `/`-separated) breaks the name rule, or None when git can hold
    it. Used for names found on disk: such a file is skipped, never fatal."""
    if not isinstance(path, str) or not path:
        return "empty path"
    if path.startswith("/"):
        return "an absolute path"
    parts = path.split("/")
    if _plain(path):  # the common case, ten times faster (a big folder's first commit)
        for part in parts:
            if part in ("", ".", "..") or len(part) > MAX_PART_BYTES:
                return part_problem(part)
        return None
    for i, part in enumerate(parts):
        problem = part_problem(part, symlink=symlink and i == len(parts) - 1)
        if problem:
            return problem
    return None


def check_path(path: object, *, symlink: bool = False) -> str:
    """`path` itself when it is a name git can hold, else `BadName` (a `bad_request`).
    The door for every name a client, the model, an upload or an import hands us."""
    if not isinstance(path, str):
        raise BadRequest("a path must be a string")
    reason = why_not(path, symlink=symlink)
    if reason:
        raise BadName(path, reason)
    return path


def skipped_entry(path: str, reason: str) -> Skipped:
    """How a left-out name is listed in a commit's, an event's and a result's `skipped`."""
    return {"path": shown(path), "reason": reason}


def split(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """(names that can be committed, names that cannot)."""
    good: list[str] = []
    bad: list[str] = []
    for path in paths:
        (good if why_not(path) is None else bad).append(path)
    return good, bad


# -- titles ---------------------------------------------------------------------------------
# The one rule for a session's title (DESIGN §4 "Search and titles"): one printable line.
#
# A title a person gives in a rename is refused when it holds a control character (ESC, NUL, a
# newline), a format character (the bidi overrides that reverse what follows, zero-width ones:
# the joiner inside emoji excepted), a line separator or a lone surrogate (`refusal`). A title
# Braid makes (a first message's first line, an imported folder's name, a created session's)
# has the same characters taken out (`plain`), so none reaches the page, a commit message or
# `git log` in the session's repository.


MAX_TITLE = 120  # characters of any title
TITLE_FIRST_LINE = 60  # characters of a title made from the first message
UNSHOWABLE = ("Cc", "Cs", "Cf", "Zl", "Zp")


def unshowable(ch: str) -> bool:
    return unicodedata.category(ch) in UNSHOWABLE and ch != "\u200d"


def title_refusal(text: str) -> str | None:
    """Why a person's title cannot be taken as it is (None: it can)."""
    return "must not contain control characters" if any(map(unshowable, text)) else None


def plain_title(text: str, limit: int = MAX_TITLE) -> str:
    """`text` as a title: what the rule refuses taken out (a tab or a line break becomes a
    space), spaces run together, at most `limit` characters."""
    kept = "".join(" " if ch.isspace() else ch for ch in text if ch.isspace()
                   or not unshowable(ch))
    return " ".join(kept.split())[:limit].rstrip()
