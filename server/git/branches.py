"""The one grammar of the branches Braid makes itself (DESIGN §3, §4): a sub-agent's
`sub_<turn id[:10]>_<label>_<hex8>` and another version of a turn's `run/<run id>`; the user's
own branches (`main`, ...) are neither. Every module that makes, tells apart or shows such a
name asks here.
"""

from __future__ import annotations

import re
import secrets

SUB_PREFIX = "sub_"
RUN_PREFIX = "run/"
MAX_LABEL = 24
RUN_BRANCH = re.compile(r"run/([0-9a-f]{32})")
SUB_BRANCH = re.compile(r"sub_[0-9a-f]+_([A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*)_[0-9a-f]{8}")


def is_sub(name: str) -> bool:
    """A sub-agent's branch (the user's or the model's child)."""
    return name.startswith(SUB_PREFIX)


def is_run(name: str) -> bool:
    """Another version of a turn (a continue, a regenerate: its own branch)."""
    return name.startswith(RUN_PREFIX)


def run_branch(run_id: str) -> str:
    return f"{RUN_PREFIX}{run_id}"


def clean_label(label: str | None) -> str:
    """A label safe inside a branch and a worktree name: no `/`, no `_` (the separator)."""
    if label is None:
        return "agent"
    cleaned = re.sub(r"[^A-Za-z0-9-]+", "-", label).strip("-")[:MAX_LABEL].strip("-")
    return cleaned or "agent"


def sub_branch(turn_id: str, label: str) -> str:
    """A new sub-agent branch of the turn `turn_id` (`label` already clean)."""
    return f"{SUB_PREFIX}{turn_id[:10]}_{label}_{secrets.token_hex(4)}"


def branch_words(branch: str) -> str:
    """A branch as people read it: `sub-agent LABEL` for a sub-agent's, else its name."""
    parts = branch.split("_")
    if is_sub(branch) and len(parts) >= 4:
        return f"sub-agent {'_'.join(parts[2:-1])}"
    return branch


def short_name(branch: str) -> str:
    """`sub_<turn>_<label>_<hex8>` reads as `label·hex4`; other names as they are."""
    if is_sub(branch):
        parts = branch.split("_")
        if len(parts) >= 4:
            return f"{'_'.join(parts[2:-1])}·{parts[-1][:4]}"
    return branch
