"""One tool call of a turn: a file tool on the session thread (backups first, backups.py),
a shell command on a thread of its own (shell.py), then its outcome recorded by the loop,
which alone writes the turn's state (`TurnContext`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent import approvals, network, orchestrate
from server.agent.sandbox import egress, limits
from server.agent.sandbox.limits import Limits
from server.agent.shell import OutputStream, Sandboxing, on_own_thread, run_sandboxed, run_shell
from server.agent.tools import ToolResult, Workspace
from server.agent.turn_context import TurnContext, add_message
from server.base import crash, events, names
from server.base.records import MessageRecord, ToolCall, ToolFunction, new_message
from server.git.session import GitSession
from server.git.workdir.scan import WORKDIR, why_left_out
from server.model.messages import arguments_error
from server.model.stream import Reply
from server.store.backups import BackupStore

if TYPE_CHECKING:
    from server.agent.orchestrate import Launch
    from server.agent.services import Services

log = logging.getLogger("braid")


@dataclass
class ToolOutcome:
    """What one tool call did, handed from its lane back to the loop, which alone writes it
    into the turn's state (`TurnContext`)."""

    content: str
    is_error: bool
    changed: list[str]


async def tool_step(braid: Services, ctx: TurnContext, call: ToolCall,
                    launch: Launch) -> MessageRecord:
    """Run one tool call and record its result message. The work goes on in its own task: a
    cancel stops the turn here, and `settle_inflight` takes the call's result before the
    turn's last commit (a shell command is killed meanwhile; a file tool has written).
    A call the session's approvals hold waits for the user first (approvals.py). `launch`:
    the driver's own (turns.py), that drives the children a `spawn_sub_agents` call runs."""
    denied = await approvals.gate(braid, ctx, call)
    if denied is not None:
        return record_tool(ctx, call, ToolOutcome(denied, True, []))
    work = asyncio.ensure_future(run_tool(braid, ctx, call, launch))
    try:
        outcome = await asyncio.shield(work)
    except asyncio.CancelledError:
        ctx.inflight = (call, work)
        raise
    return record_tool(ctx, call, outcome)


async def settle_inflight(ctx: TurnContext) -> None:
    if ctx.inflight is None:
        return
    call, work = ctx.inflight
    ctx.inflight = None
    try:
        outcome = await work
    except orchestrate.ServerStopping:  # left unanswered: resuming the run runs it again
        return
    except Exception:  # noqa: BLE001 - the call then gets the "stopped" error result
        log.exception("a tool call of run %s failed while it was stopped", ctx.run_id)
        return
    record_tool(ctx, call, outcome)


async def run_tool(braid: Services, ctx: TurnContext, call: ToolCall,
                   launch: Launch) -> ToolOutcome:
    """One tool call: a file tool on the session thread (it writes files and backs them up);
    a shell command on a thread of its own, then one look at what it changed on the
    session thread. Reads the turn's state; never writes it."""
    crash.at("turn.tool")
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")
    bad_args = arguments_error(fn.get("arguments"))
    handle, run_id = ctx.handle, ctx.run_id
    if name in orchestrate.NAMES and braid.settings.subagent_tools:  # the model's sub-agents
        if bad_args:
            return ToolOutcome(bad_args, True, [])
        content, is_error = await orchestrate.run_call(
            braid, ctx, name, str(fn.get("arguments") or "{}"), str(call.get("id") or ""),
            launch)
        return ToolOutcome(content, is_error, [])
    if name in (braid.store.get(handle.session_id).meta.get("tools_off") or ()):
        return ToolOutcome(f"error: the tool {name} is switched off in this session", True, [])
    if braid.mcp.is_mcp(name, handle.session_id):  # an MCP server's tool (mcp_servers/)
        return await _mcp_tool(braid, ctx, name, bad_args or None, fn)
    if name != "shell":
        if bad_args:
            return ToolOutcome(bad_args, True, [])
        return await handle.call(lambda git: _file_tool(braid, git, run_id, name, fn))
    workspace = Workspace(handle.path / WORKDIR, shell_enabled=braid.settings.shell,
                          shell_timeout=braid.settings.shell_timeout,
                          shell_runner=shell_runner(braid, ctx, str(call.get("id") or "")))
    result = ToolResult(bad_args, is_error=True) if bad_args else await on_own_thread(
        lambda: workspace.execute(name, fn.get("arguments") or "{}"),
        f"shell-{handle.session_id[:8]}")
    # Its output so far is kept for a page opened mid-command only: the result has it now
    # (the output's last events were queued on the loop before this result).
    active = braid.runs.find(handle.session_id, run_id)
    if active is not None:
        active.output.pop(str(call.get("id") or ""), None)
    known = sorted(ctx.changed)
    return await handle.call(lambda git: _after_shell(braid, git, run_id, known, result))


async def _mcp_tool(braid: Services, ctx: TurnContext, name: str, bad_args: str | None,
                    fn: ToolFunction) -> ToolOutcome:
    """A call to an MCP server's tool. A stdio server works in the workdir like a command:
    what it changed is found by one status scan after it answered, as for the shell."""
    handle = ctx.handle
    workdir = handle.path / WORKDIR
    if bad_args:
        return ToolOutcome(bad_args, True, [])
    content, is_error = await braid.mcp.call(handle.session_id, workdir, name,
                                             str(fn.get("arguments") or "{}"))
    result = ToolResult(content, is_error=is_error)
    if not braid.mcp.is_stdio(name):
        return ToolOutcome(content, is_error, [])
    known = sorted(ctx.changed)
    return await handle.call(lambda git: _after_shell(braid, git, ctx.run_id, known, result))
OUTPUT_KEPT = 64 * 1024  # of a running command's output, for a page opened mid-command


def shell_runner(braid: Services, ctx: TurnContext, call_id: str
                 ) -> Callable[[str, Path], tuple[str, bool]]:
    """How this call's command runs (DESIGN §4 "The shell"): in the sandbox, its output
    streamed as `tool_output` events and its web requests through the egress proxy with
    the session's consent; on the host only where the operator chose `host`."""
    settings = braid.settings
    loop = asyncio.get_running_loop()
    sid, run_id = ctx.handle.session_id, ctx.run_id
    found = braid.runs.find(sid, run_id)
    branch = found.branch if found is not None else ""

    def publish(text: str) -> None:  # on the loop
        active = braid.runs.find(sid, run_id)
        if active is not None:
            active.output[call_id] = (active.output.get(call_id, "") + text)[-OUTPUT_KEPT:]
        braid.bus.publish(sid, events.tool_output(run_id, call_id, text, branch=branch))

    def send(text: str) -> None:  # on the command's thread
        with contextlib.suppress(RuntimeError):  # the loop is gone: the server stops
            loop.call_soon_threadsafe(publish, text)

    stream = OutputStream(send)
    if settings.shell_mode == "host":
        return lambda command, cwd: run_shell(command, cwd=cwd, timeout=settings.shell_timeout,
                                              output=stream)
    bounds = Limits(procs=settings.shell_max_procs, memory=settings.shell_max_memory,
                    write=settings.shell_max_write, timeout=settings.shell_timeout)
    consent = network.CommandNetwork(braid, ctx, call_id)

    def attach(pid: int) -> Callable[[], None]:  # on the command's thread
        # The listener already listens: a connection made before the loop serves it waits
        # in its backlog, so neither the start nor the end waits for the loop.
        listener = egress.attach(pid)
        proxy = egress.Proxy(consent.consent, settings.shell_hosts)
        try:
            serving = asyncio.run_coroutine_threadsafe(proxy.serve(listener), loop)
        except BaseException:
            listener.close()
            raise

        async def close() -> None:
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(serving)
            await proxy.close()
            listener.close()

        def stop() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server stops
                asyncio.run_coroutine_threadsafe(close(), loop)
        return stop

    plan = Sandboxing(limits=bounds, cgroup=limits.why_not() is None, output=stream,
                      network=None if consent.mode() == "off" else attach)
    return lambda command, cwd: run_sandboxed(command, workdir=cwd, plan=plan)


def _file_tool(braid: Services, git: GitSession, run_id: str, name: str,
               fn: ToolFunction) -> ToolOutcome:
    backups = BackupStore(git)  # each file's pre-turn content, for revert (backups.py)

    def before_write(rel: str) -> None:
        backups.backup_before_edit(run_id, str(git.path / WORKDIR / rel))

    workspace = Workspace(git.path / WORKDIR, before_write=before_write,
                          shell_enabled=braid.settings.shell,
                          shell_timeout=braid.settings.shell_timeout)
    result = workspace.execute(name, fn.get("arguments") or "{}")
    return ToolOutcome(result.content, result.is_error, list(result.changed))


def _after_shell(braid: Services, git: GitSession, run_id: str, known: list[str],
                 result: ToolResult) -> ToolOutcome:
    # A shell command may change anything: found by one status scan, after it ran. A name
    # git cannot hold joins the changes all the same: the checkpoint leaves it out and lists
    # it (`skipped`); the model is told, so it can rename it.
    found = [rel[len(WORKDIR) + 1:] for rel in git.scan.changed_paths()]
    work = git.path / WORKDIR
    left = {rel: why for rel in found if (why := why_left_out(work, rel))}
    content, is_error = result.content, result.is_error
    if left:
        content += "\n" + _left_out_note(left)
        is_error = True
    backed = {*names.split(known)[0], *(rel for rel in found if rel not in left)}
    BackupStore(git).backup_from_head(run_id, sorted(backed))
    return ToolOutcome(content, is_error, found)


def _left_out_note(left: dict[str, str]) -> str:
    """What the model reads of the names its command made that git cannot hold."""
    listed = ", ".join(f"'{names.shown(p)}' ({why})" for p, why in list(left.items())[:10])
    more = f" and {len(left) - 10} more" if len(left) > 10 else ""
    return (f"error: file names git cannot hold were left out of the commit: {listed}{more}. "
            f"Rename them (e.g. with the shell) to keep them.")


def record_tool(ctx: TurnContext, call: ToolCall, outcome: ToolOutcome
                ) -> MessageRecord:
    """On the loop: the call's changed paths and its result message join the turn."""
    ctx.changed.update(outcome.changed)
    ctx.tool_calls += 1
    name = str((call.get("function") or {}).get("name") or "")
    msg = new_message("tool", ctx.run_id, outcome.content, tool_call_id=call.get("id", ""),
                      name=name, is_error=outcome.is_error or None)
    add_message(ctx, msg)
    return msg


def batch_summary(reply: Reply) -> str:
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
