"""Named crash points for the fault-injection suite (tests/faults/).

`BRAID_CRASH_AT=revert.after_files` makes the process kill itself with SIGKILL when it reaches
that point, as `kill -9` would; `BRAID_CRASH_MODE=raise` raises `CrashPoint` there instead
(an exception inside a turn or an operation). Unset, `at` is a function that does nothing:
the environment is read once, at import, and never on the hot path.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from server.base.settings import Settings

# Every point the code can stop at, by operation (the fault table's rows and columns).
# `<op>.before_commit` / `<op>.after_commit` sit in `GitSession.write_checkpoint` (named by the
# commit's kind; a turn's `tool-batch` and `turn` commits are the `checkpoint` operation).
POINTS: dict[str, tuple[str, ...]] = {
    "checkpoint": ("checkpoint.before_commit", "checkpoint.after_commit"),
    "revert": ("revert.after_files", "revert.before_commit", "revert.after_commit"),
    "unrevert": ("unrevert.after_files", "unrevert.before_commit", "unrevert.after_commit"),
    # A files-only rewind (timetravel.rewind_files): its files written; its commit is a
    # `revert`, whose commit points are the revert's.
    "rewind": ("rewind.after_files",),
    "merge": ("merge.after_turn_files", "merge.after_files", "merge.before_commit",
              "merge.after_commit"),
    "fork": ("fork.after_init", "fork.after_commits", "fork.after_checkout"),
    "sub-agent": ("subagent.after_worktree", "sub-agent.before_commit",
                  "sub-agent.after_commit"),
    # The model's tools (agent/orchestrate.py): a spawn with its children's branches made, one
    # child finished, all finished but the tool result not yet written; a merge tool call's
    # files written (its commit's points are the merge's `merge.before/after_commit`).
    "spawn": ("spawn.after_branches", "spawn.after_child", "spawn.before_result"),
    "merge-tool": ("merge-tool.after_files", "merge-tool.after_commit"),
    "checkout": ("checkout.after_files", "checkout.after_head"),
    "recovery": ("recovery.after_rollback", "recovery.after_commit"),
    # Export to a folder (exporting.py): its files staged in its private folder, half of
    # them renamed into place, all renamed but the folder's state not moved, state moved.
    "export": ("export.after_temp_files", "export.mid_rename", "export.after_renames",
               "export.after_state"),
    # An upload (uploads.py; tests/faults/test_crash_upload.py): streamed to its staging
    # folder, intent written, one file renamed in, all renamed in, committed.
    "upload": ("upload.after_temp", "upload.after_intent", "upload.mid_rename",
               "upload.after_renames", "upload.after_commit"),
    "import": ("import.after_files", "import.after_commit", "import.after_meta",
               "import.after_build", "import.after_index"),
    # An update's commit is a `user-edit`: its points inside write_checkpoint are those.
    "update": ("update.after_snapshot", "user-edit.before_commit", "user-edit.after_commit",
               "update.after_commit"),
    # A queued message started (features/queue.py): claimed in the database, then its turn
    # launched (run indexed) but its row not yet deleted.
    "queue": ("queue.after_claim", "queue.after_launch"),
    # A compaction (agent/compaction/run.py): its summary asked of the model, then its one
    # commit (`Braid-Kind: compaction`).
    "compaction": ("compaction.model", "compaction.before_commit", "compaction.after_commit"),
}
_OPERATION_OF_KIND = {"tool-batch": "checkpoint", "turn": "checkpoint"}
# Steps of a turn where an injected exception must still end the run with an event.
TURN_STEPS = ("turn.prepare", "turn.model", "turn.tool", "turn.checkpoint", "turn.finish")


class CrashPoint(RuntimeError):
    """Raised at an armed point in `raise` mode."""


def _noop(name: str) -> None:
    return None


def _noop_commit(kind: str, stage: str) -> None:
    return None


def _commit_point(kind: str, stage: str) -> None:
    at(f"{_OPERATION_OF_KIND.get(kind, kind)}.{stage}")


def _make(armed: str, mode: str) -> Callable[[str], None]:
    fired = False

    def at(name: str) -> None:
        nonlocal fired
        if name != armed:
            return
        if mode == "raise":
            if not fired:  # once, like a transient failure: what follows must cope
                fired = True
                raise CrashPoint(f"injected failure at {name}")
            return
        os.kill(os.getpid(), signal.SIGKILL)

    return at


def arm(name: str | None, mode: str = "kill") -> None:
    """Arm one point (None disarms). Tests in the same process use `raise`."""
    global at, commit_point
    at = _make(name, mode) if name else _noop
    commit_point = _commit_point if name else _noop_commit


at: Callable[[str], None] = _noop
# (commit kind, "before_commit" | "after_commit"): the points inside write_checkpoint.
commit_point: Callable[[str, str], None] = _noop_commit
_armed = Settings.from_env(only=("crash_at", "crash_mode"))  # the table (settings.py), read once
arm(_armed.crash_at, _armed.crash_mode)
