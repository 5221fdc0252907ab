"""One tool call of a turn, on the session thread: backups before each file change
(backups.py), the tool (tools.py), what it changed, and its result message."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import crash, names
from .backups import BackupStore
from .git_session import WORKDIR, GitSession
from .model_messages import arguments_error
from .tools import ToolResult, Workspace
from .turn_context import TurnContext, add_message, new_message

if TYPE_CHECKING:
    from .braid import Braid


def run_tool(braid: Braid, git: GitSession, ctx: TurnContext, call: dict[str, Any]) -> dict:
    """Run one tool call on the session thread and record its result message."""
    crash.at("turn.tool")
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")

    backups = BackupStore(git)  # each file's pre-turn content, for revert (backups.py)

    def before_write(rel: str) -> None:
        backups.backup_before_edit(ctx.run_id, str(git.path / WORKDIR / rel))

    workspace = Workspace(git.path / WORKDIR, before_write=before_write,
                          shell_enabled=braid.settings.shell,
                          shell_timeout=braid.settings.shell_timeout)
    bad_args = arguments_error(fn.get("arguments"))
    result = ToolResult(bad_args, is_error=True) if bad_args else \
        workspace.execute(name, fn.get("arguments") or "{}")
    ctx.changed.update(result.changed)
    if name == "shell":
        # A shell command may change anything: found by one status scan, after it ran.
        dirty, unnamed = names.split(git.changed_workdir_paths())
        for rel in dirty:
            ctx.changed.add(rel[len(WORKDIR) + 1:])
        if unnamed:
            result.content += "\n" + names.refusal([p[len(WORKDIR) + 1:] for p in unnamed])
            result.is_error = True
        backups.backup_from_head(ctx.run_id, sorted(ctx.changed))
    ctx.tool_calls += 1
    msg = new_message("tool", ctx.run_id, result.content, tool_call_id=call.get("id", ""),
                      name=name, is_error=result.is_error or None)
    add_message(ctx, msg)
    return msg


def batch_summary(reply: Any) -> str:
    parts = []
    for call in reply.tool_calls[:4]:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {}
        target = args.get("path") or args.get("command") or ""
        parts.append(f"{fn.get('name')} {target}".strip())
    return "Tools: " + ", ".join(parts)
