"""File names that are not valid UTF-8 (DESIGN §4: never a dead task).

A name made on disk by the user or a shell command can hold any bytes; Python shows the bad
ones as lone surrogates (`surrogateescape`), and git's tree builder in pygit2 takes only
UTF-8. Such a file is left out of every commit and named, escaped, in a tool error, so the
model (or the user) can rename it; everything else in the turn goes on.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """The name with its undecodable bytes escaped (`bad\\xff.txt`), safe to print."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def split(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """(names that can be committed, names that cannot)."""
    good: list[str] = []
    bad: list[str] = []
    for path in paths:
        (good if is_utf8(path) else bad).append(path)
    return good, bad


def refusal(paths: list[str]) -> str:
    listed = ", ".join(f"'{shown(p)}'" for p in paths[:10])
    more = f" and {len(paths) - 10} more" if len(paths) > 10 else ""
    return (f"error: file names that are not valid UTF-8 cannot be committed and were left "
            f"out: {listed}{more}. Rename them (e.g. with the shell) to keep them.")
