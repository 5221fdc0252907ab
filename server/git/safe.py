"""Git on a user's folder or repository without running that repository's code (DESIGN §4
"Boundaries"): one way to call the git CLI, whose `-c` overrides beat every config file the
repository brings (command-line config is read last and wins, includes too), with no GIT_*
variable of the server's environment and no system config; and where a folder's repository
really is: its `.git` (a folder, or a file saying `gitdir: ...`), `commondir` and object
alternates must all lie inside the user's roots, or the folder is refused.

A hostile `.git/config` may set `core.fsmonitor` (run by `ls-files`, `status`, `rev-parse`
reading the index: the attack of issue 21 row 1), `core.hooksPath`, `core.sshCommand`,
`diff.external`, `credential.helper`, `core.askPass`, `core.pager`, `protocol.ext.allow`:
each is overridden below (git 2.39; tests/faults/test_boundaries_sources.py). One key is not
last-wins: `core.gitProxy` keeps its first value, so a repository's own would beat ours; it
only serves git:// connections, which Braid makes only for a clone, whose repository (and
config) is Braid's new one. The commands Braid runs in a user's repository (`ls-files`,
`init`) connect nowhere, and `protocol.allow=never` makes sure of it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from server.base.errors import Forbidden


class Roots(Protocol):
    """The folders a user may reach (`features.roots.Roots`): what a repository's own
    pointers are checked against."""

    def root_of(self, real: Path) -> Path | None: ...
    def covers(self, real: Path) -> bool: ...

SAFE_CONFIG = (
    "core.fsmonitor=false",  # a command git runs whenever it reads the index
    "core.hooksPath=/dev/null",  # no hook (/dev/null is no folder: every hook is missing)
    "core.sshCommand=false", "core.gitProxy=", "core.askPass=", "credential.helper=",
    "core.pager=cat", "diff.external=", "core.alternateRefsCommand=",
    "protocol.allow=never", "protocol.ext.allow=never", "protocol.fd.allow=never",
    "protocol.file.allow=never", "gc.auto=0", "maintenance.auto=false",
    "core.untrackedCache=false", "core.splitIndex=false", "index.threads=1",
)
# Environment variables a child git must not inherit besides GIT_* (they name programs).
_UNSAFE_ENV = ("SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "EDITOR", "VISUAL", "PAGER")
ALTERNATES_DEPTH = 5  # git's own limit on chained alternates
MAX_LINK_FILE = 64 * 1024
MAX_REF_FOLDERS = 20_000


def git_env(allow_protocols: str = "") -> dict[str, str]:
    """The server's environment minus GIT_* and the program-naming variables, plus no system
    config, no prompt, and only `allow_protocols` as transports ("" for none)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") and k not in _UNSAFE_ENV}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="",
               GIT_ALLOW_PROTOCOL=allow_protocols, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return env


def run_git(args: list[str], *, timeout: float = 300, config: tuple[str, ...] = (),
            allow_protocols: str = "") -> subprocess.CompletedProcess[bytes]:
    """The one way Braid runs git on a user's folder or repository: SAFE_CONFIG, then
    `config` (a clone's own overrides, which may re-allow its one transport)."""
    cmd = ["git", "--no-pager"]
    for item in (*SAFE_CONFIG, *config):
        cmd += ["-c", item]
    return subprocess.run([*cmd, *args], capture_output=True, env=git_env(allow_protocols),
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class RepoDirs:
    """A repository as git would open it: its git dir and (None for a bare one) the top of
    its work tree."""

    git_dir: Path
    work_tree: Path | None


def _looks_like_git_dir(path: Path) -> bool:
    """git's is_git_directory, roughly: HEAD, and objects/ + refs/ here or in commondir."""
    if not (path / "HEAD").is_file():
        return False
    common = path
    text = _small_text(path / "commondir")
    if text is not None:
        common = _relative(path, text.strip())
    return (common / "objects").is_dir() and (common / "refs").is_dir()


def _small_text(path: Path) -> str | None:
    """A small link file's text (`.git`, commondir, alternates), or None: never a FIFO or a
    device (a read would hang), never more than a few KiB."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            return f.read(MAX_LINK_FILE).decode(errors="replace")
    except OSError:  # unreadable: git could not follow it either
        return None


def _relative(base: Path, value: str) -> Path:
    return Path(os.path.realpath(base / value))  # an absolute value replaces base


def _gitdir_of_file(dotgit: Path) -> Path:
    text = (_small_text(dotgit) or "").strip()
    if not text.startswith("gitdir:"):
        return dotgit  # not a link: refused below as not a git dir
    return _relative(dotgit.parent, text[len("gitdir:"):].strip())


def check_git_dir(git_dir: Path, roots: Roots, shown: str) -> None:
    """Refuse (`forbidden`) a git dir whose real path, commondir or object alternates (what
    libgit2 and git follow to read objects and refs) lie outside the roots or in the data
    dir."""
    real = Path(os.path.realpath(git_dir))
    todo = [real]
    common = _small_text(real / "commondir")
    if common is not None:
        todo.append(_relative(real, common.strip()))
    git_dirs = list(todo)
    objects = [d / "objects" for d in todo]
    seen: set[Path] = set()
    for _ in range(ALTERNATES_DEPTH):
        found: list[Path] = []
        for obj in objects:
            if obj in seen:
                continue
            seen.add(obj)
            todo.append(obj)
            found += _alternates(obj)
        objects = found
    todo += objects  # past git's depth: not followed, but refused all the same
    todo += [link for d in git_dirs for link in _symlinks(d, shown)]
    for path in todo:
        if not roots.covers(Path(os.path.realpath(path))):
            raise Forbidden(f"the repository at {shown} reaches outside the folders you may "
                            f"import from ({path.name})")


def _symlinks(git_dir: Path, shown: str) -> list[Path]:
    """The symlinks in a git dir where git and libgit2 read and write (its top, objects/ and
    objects/pack/, refs/ and logs/ all the way down): a `refs -> /elsewhere/refs` would make
    an export to a branch write there."""
    found: list[Path] = []
    todo = [(git_dir, False), (git_dir / "objects", False), (git_dir / "objects" / "pack", False),
            (git_dir / "refs", True), (git_dir / "logs", True)]
    scanned = 0
    while todo:
        folder, deep = todo.pop()
        scanned += 1
        if scanned > MAX_REF_FOLDERS:
            raise Forbidden(f"the repository at {shown} has too many ref folders to check")
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and not (folder == git_dir and entry.name == "hooks"):
                found.append(Path(entry.path))  # (hooks never run: SAFE_CONFIG, libgit2)
            elif deep and entry.is_dir(follow_symlinks=False):
                todo.append((Path(entry.path), True))
    return found


def _alternates(objects: Path) -> list[Path]:
    lines = (_small_text(objects / "info" / "alternates") or "").splitlines()
    return [_relative(objects, line.strip()) for line in lines
            if line.strip() and not line.startswith("#")]


def find_repo(folder: Path, roots: Roots, shown: str) -> RepoDirs | None:
    """The repository `folder` is in, found as git finds it (its own `.git` or a parent's,
    or the folder itself when it is a bare repository), but only up to the root that holds
    it: a repository above the roots is not used. `forbidden` when what it names (a `.git`
    file's gitdir, commondir, alternates) leaves the roots."""
    top = roots.root_of(folder)
    if top is None:
        return None
    if _looks_like_git_dir(folder) and not (folder / ".git").exists():
        check_git_dir(folder, roots, shown)
        return RepoDirs(folder, None)
    here = folder
    while True:
        dotgit = here / ".git"
        if dotgit.is_symlink() or dotgit.exists():
            git_dir = _gitdir_of_file(dotgit) if dotgit.is_file() else dotgit
            check_git_dir(git_dir, roots, shown)  # before git or libgit2 opens anything
            if _looks_like_git_dir(Path(os.path.realpath(git_dir))):
                return RepoDirs(Path(os.path.realpath(git_dir)), here)
        if here == top or here.parent == here:
            return None
        here = here.parent
