"""Approvals (DESIGN §4 "Approvals"): a session's `approvals` mode makes some tool calls wait
for the user before they run.

- Modes (`session.json`'s `approvals`): `auto` (the default: nothing waits), `shell` (the
  shell waits), `writes` (every tool that changes files, and the shell). A tool the user
  answered `always` (`approvals_always`) no longer waits in that session.
- `gate` runs in the turn before a tool call (turn_tools.tool_step), so nothing of the call
  is written before its answer: it publishes `approval_needed`, keeps the call on its live
  run (`ActiveRun.waiting`: what a reload or another tab draws) and waits for `answer`.
  A stop while waiting cancels the wait like any step of the turn. A server killed while
  waiting leaves the run RUNNING on disk without the call (the model's reply was never
  committed): recovery makes it INTERRUPTED, and a resume asks the model, and the user,
  again.
- Answers come from `features.session_meta.approve_tool_call` (which persists `always`),
  on this process or, on a team server, from another one through `pg_team`'s control
  channel.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from typing import TYPE_CHECKING

from server.agent.live_runs import ActiveRun
from server.agent.tool_paths import PathEscape, resolve_in
from server.base import events
from server.base.records import SessionMeta, ToolCall
from server.base.results import WaitingCall
from server.git.branches import is_sub
from server.git.workdir.scan import WORKDIR

if TYPE_CHECKING:
    from pathlib import Path

    from server.agent.services import Services
    from server.agent.turn_context import TurnContext

MODES = ("auto", "shell", "writes")
DECISIONS = ("approve", "deny", "always")
# Every tool of the model's that changes files: a merge brings other branches' files (and,
# with `agent`, conflict markers) into the branch, so it asks like a write.
WRITES = frozenset({"write_file", "edit_file", "apply_patch", "delete_file", "shell",
                    "merge_branches"})
MAX_PREVIEW = 200_000  # bytes of a file read for a diff; larger files show the arguments
MAX_DIFF = 100_000


def mode_of(meta: SessionMeta) -> str:
    mode = meta.get("approvals")
    return mode if mode in MODES else "auto"


def needs_approval(meta: SessionMeta, tool: str, mcp_write: bool = False) -> bool:
    """`mcp_write`: an MCP tool whose annotations do not say `readOnlyHint: true`."""
    mode = mode_of(meta)
    if mode == "auto" or tool in (meta.get("approvals_always") or ()):
        return False
    return tool == "shell" if mode == "shell" else tool in WRITES or mcp_write


def denied_text(reason: str) -> str:
    """The tool result the model reads for a denied call."""
    return f"denied by the user: {reason.strip() or 'no reason given'}"


async def gate(braid: Services, ctx: TurnContext, call: ToolCall) -> str | None:
    """Before `call` runs: None to run it, or the denial the model gets as its result."""
    fn = call.get("function") or {}
    tool = str(fn.get("name") or "")
    sid, run_id = ctx.handle.session_id, ctx.run_id
    # The session's own settings (a sub-agent's handle holds its worktree's older copy).
    mcp_write = braid.mcp.is_mcp(tool, sid) and not braid.mcp.read_only(tool, sid)
    if not needs_approval(braid.store.get(sid).meta, tool, mcp_write):
        return None
    active = braid.runs.find(sid, run_id)
    if active is None:  # not a live run of this process (never so for a driven turn)
        return None
    raw = fn.get("arguments") or "{}"
    try:
        args: dict[str, object] | str = json.loads(raw)
    except ValueError:
        args = raw
    if not isinstance(args, dict):
        args = raw
    waiting: WaitingCall = {"run_id": run_id, "call_id": str(call.get("id") or ""),
                            "tool": tool, "args": args, "branch": active.branch,
                            "shown_in": _shown_in(braid, ctx, active)}
    if isinstance(args, dict):
        root = ctx.handle.path / WORKDIR
        diff = await ctx.handle.call(lambda git: preview(root, tool, args))
        if diff:
            waiting["diff"] = diff
    label = (ctx.run.get("sub_agent") or {}).get("label")
    if label:
        waiting["label"] = str(label)
    decision, reason = await _wait(braid, active, waiting)
    return denied_text(reason) if decision == "deny" else None


async def ask_network(braid: Services, ctx: TurnContext, call_id: str, host: str,
                      port: int) -> tuple[str, str]:
    """A sandboxed command of this turn wants to reach `host` (agent/network.py): the user's
    (decision, reason). Without a live run to show it in, the answer is a denial."""
    sid, run_id = ctx.handle.session_id, ctx.run_id
    active = braid.runs.find(sid, run_id)
    if active is None:
        return "deny", "no one to ask"
    waiting: WaitingCall = {"run_id": run_id, "call_id": call_id, "tool": "network",
                            "args": {"host": host, "port": port}, "branch": active.branch,
                            "shown_in": _shown_in(braid, ctx, active)}
    label = (ctx.run.get("sub_agent") or {}).get("label")
    if label:
        waiting["label"] = str(label)
    return await _wait(braid, active, waiting)


async def _wait(braid: Services, active: ActiveRun, waiting: WaitingCall) -> tuple[str, str]:
    call_id, sid = waiting["call_id"], active.session_id
    future: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
    active.waiting[call_id] = waiting
    active.answers[call_id] = future
    braid.bus.publish(sid, events.approval_needed(waiting))
    try:
        # Waiting on the user holds no turn slot: an unanswered call must not keep another
        # user's turn (or this user's next one) waiting (issue 34).
        async with braid.turn_gate.lend():
            decision, reason = await future
    finally:
        active.waiting.pop(call_id, None)
        active.answers.pop(call_id, None)
    braid.bus.publish(sid, events.approval_resolved(waiting, decision, reason))
    return decision, reason


def answer(active: ActiveRun, call_id: str, decision: str, reason: str) -> bool:
    """Resolve a waiting call of this process's run; False if it is not waiting (any more)."""
    future = active.answers.get(call_id)
    if future is None or future.done():
        return False
    future.set_result((decision, reason))
    return True


def _shown_in(braid: Services, ctx: TurnContext, active: ActiveRun) -> str:
    """The run whose bubble shows the call: its own; for a sub-agent, the nearest run up its
    parents that is not a sub-agent (the one the user watches, or the finished turn the user
    spawned it from)."""
    if not ctx.run.get("sub_agent") and not is_sub(active.branch):
        return ctx.run_id
    live = {a.run_id: a for a in braid.runs.for_session(active.session_id)}
    parent = ctx.run.get("parent_run_id")
    seen: set[str] = set()
    while parent and parent in live and parent not in seen:
        seen.add(parent)
        up = live[parent]
        if not is_sub(up.branch):
            return parent
        above = up.ctx.run.get("parent_run_id") if up.ctx is not None else None
        parent = above if isinstance(above, str) else None
    return str(parent or ctx.run_id)


def preview(root: Path, tool: str, args: dict[str, object]) -> str | None:
    """A file tool's change as a unified diff (old vs new content), before it is made."""
    if tool == "apply_patch":
        patch = args.get("patch")
        return patch[:MAX_DIFF] if isinstance(patch, str) else None
    path = args.get("path")
    if tool not in ("write_file", "edit_file", "delete_file") or not isinstance(path, str):
        return None
    old = _current(root, path)
    if old is None:
        return None
    new = _after(tool, old, args)
    if new is None:
        return None
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}")
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text[:MAX_DIFF]


def _current(root: Path, path: str) -> str | None:
    """The file's text now ("" when it does not exist), or None when it cannot be shown."""
    try:
        target, _ = resolve_in(root, path, follow_final=True)
        if not target.exists():
            return ""
        if not target.is_file() or target.stat().st_size > MAX_PREVIEW:
            return None
        return target.read_bytes().decode("utf-8", errors="replace")
    except (PathEscape, OSError, ValueError):
        return None


def _after(tool: str, old: str, args: dict[str, object]) -> str | None:
    if tool == "delete_file":
        return ""
    if tool == "write_file":
        content = args.get("content")
        return content if isinstance(content, str) else None
    old_text, new_text = args.get("old_text"), args.get("new_text")
    if not isinstance(old_text, str) or not isinstance(new_text, str):
        return None
    if old_text == "":
        return old + new_text
    return old.replace(old_text, new_text, 1) if old.count(old_text) == 1 else None
