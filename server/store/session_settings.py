"""A session's settings belong to the session, not to a branch (DESIGN §4 "Approvals").

`session.json` is committed on the branches, so a branch made from an old checkpoint (Edit &
rerun, a rewind, a checkout of a sibling) holds that checkpoint's copy: read back at a
restart or when an idle session is opened again, it put the old `approvals`, `always` list,
model and title back, and a later write ran unasked (issue 31). So the settings are also kept
in one file of the repository that no branch holds, `.git/braid-settings.json`, written
(atomically, synced) before any branch's `session.json` is, and read over whatever
`session.json` the checked-out branch has. A session without the file (made before it
existed, or never changed since it was made) reads its `session.json` as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import cast

from server.base.records import SessionMeta

# The keys that are the session's: what `update_session` changes (and the first turn's title).
SETTINGS = ("title", "model", "endpoint", "archived", "approvals", "approvals_always",
            "shell_network", "shell_network_hosts", "tools_off")
FILE = "braid-settings.json"


def settings_path(session_path: Path) -> Path:
    return session_path / ".git" / FILE


def of(meta: SessionMeta) -> dict[str, object]:
    """The settings part of `meta` (an absent key is the default)."""
    raw = cast("dict[str, object]", meta)
    return {key: raw[key] for key in SETTINGS if key in raw}


def overlay(meta: SessionMeta, session_path: Path) -> SessionMeta:
    """`meta` (a branch's `session.json`) with the session's own settings, when kept."""
    try:
        saved = json.loads(settings_path(session_path).read_bytes())
    except FileNotFoundError:
        return meta
    except (OSError, ValueError):  # unreadable: the branch's copy, as before the file existed
        return meta
    if not isinstance(saved, dict):
        return meta
    raw = cast("dict[str, object]", meta)
    for key in SETTINGS:
        if key in saved:
            raw[key] = saved[key]
        else:
            raw.pop(key, None)
    return meta


def load(session_path: Path) -> SessionMeta:
    """The session's metadata: the checked-out `session.json` under its own settings."""
    meta: SessionMeta = json.loads((session_path / "session.json").read_text())
    return overlay(meta, session_path)


def save(session_path: Path, meta: SessionMeta, *, synced: bool = True) -> None:
    """Keep `meta`'s settings as the session's: a temporary file synced, renamed over the
    old one, the folder synced (a kill -9 or a power cut leaves the old file or the new).
    `synced=False`: a new folder its maker syncs whole (a fork)."""
    if not (session_path / ".git").is_dir():  # a sub-agent's worktree: not the session
        return
    target = settings_path(session_path)
    tmp = target.with_name(f"{FILE}.tmp")
    data = json.dumps(of(meta), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
        if synced:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    if not synced:
        return
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
