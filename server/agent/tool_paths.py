"""Where the agent's tools may act: paths confined to one `workdir/` (no absolute path, no
`..` above the root, no symlinked folder leading out, every part a name git can hold: the
one name rule of names.py, so nothing inside `.git` in any spelling), and the one way they
write a file (folders made, then re-checked, then `O_NOFOLLOW`)."""

from __future__ import annotations

import os
from pathlib import Path

from server.base.names import part_problem, shown

FILE_MODE = 0o666  # new files get the usual mode, filtered by the umask as open(2) does


class PathEscape(Exception):
    """A path leads outside the workspace root, or into a place the tools must not touch."""


def lexical_parts(path: object) -> list[str]:
    """The path's parts with `.` and `..` taken lexically, or PathEscape."""
    if not isinstance(path, str):
        raise PathEscape("path must be a string")
    if path.startswith("/") or os.path.isabs(path):
        raise PathEscape(f"absolute paths are not allowed: {path!r}")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PathEscape(f"path leads outside the workspace: {path!r}")
            # Lexical: `link/..` means the folder holding `link`, never the link
            # target's parent, and the real path below is built from these parts only.
            parts.pop()
        else:
            parts.append(part)
    reject_git(parts, path)
    return parts


def resolve_in(root: Path, path: str, *, follow_final: bool,
               allow_root: bool = True) -> tuple[Path, str]:
    """(absolute real path, workdir-relative POSIX path) of `path` under `root`."""
    parts = lexical_parts(path)
    root_real = os.path.realpath(root)
    # Every existing prefix must stay inside: a symlinked folder pointing outside is an
    # escape even when a later link would lead back in.
    current = root_real
    for part in parts:
        current = os.path.join(current, part)
        if not os.path.lexists(current):
            break
        check_inside(os.path.realpath(current), root_real, path)
    lexical = os.path.join(root_real, *parts)
    real = os.path.realpath(lexical)
    check_inside(real, root_real, path)
    if not follow_final and parts:
        # Acting on the entry itself (deleting a symlink removes the link, not its target).
        parent = os.path.realpath(os.path.dirname(lexical))
        check_inside(parent, root_real, path)
        real = os.path.join(parent, parts[-1])
    rel = os.path.relpath(real, root_real).replace(os.sep, "/")
    if rel == "." and not allow_root:
        raise PathEscape("the workspace root itself cannot be written or deleted")
    reject_git([] if rel == "." else rel.split("/"), path)
    return Path(real), rel


def blocking_parent(root: Path, abs_path: Path) -> str | None:
    """The workdir-relative name of an existing file where a parent folder must go."""
    root_real = Path(os.path.realpath(root))
    for parent in abs_path.parents:
        if parent == root_real or root_real not in parent.parents:
            return None
        if parent.exists():
            return None if parent.is_dir() else parent.relative_to(root_real).as_posix()
    return None


def write_bytes(root: Path, abs_path: Path, data: bytes, *, append: bool = False) -> None:
    root_real = os.path.realpath(root)
    abs_path.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating folders: a swap between resolve and now must not escape.
    check_inside(os.path.realpath(abs_path.parent), root_real, str(abs_path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    # O_NOFOLLOW: the resolved path's last component is never a symlink, so if one
    # appears now it was planted after the check, and following it could leave the root.
    fd = os.open(abs_path, flags, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def check_inside(real: str, root_real: str, original: str) -> None:
    if real != root_real and not real.startswith(root_real.rstrip(os.sep) + os.sep):
        raise PathEscape(f"path leads outside the workspace: {original!r}")


def reject_git(parts: list[str], original: str) -> None:
    """PathEscape unless every part is a name git can hold (names.py: no `.git` in any
    spelling a file system takes for it, no NUL, valid UTF-8, at most 255 bytes): a file the
    tools write is one the next checkpoint can commit, and nothing is written otherwise."""
    for part in parts:
        problem = part_problem(part)
        if problem:
            raise PathEscape(f"bad file name '{shown(original)}': {problem} (git cannot "
                             f"hold it; use another name)")
