"""Turns: one user input and the model loop that answers it (DESIGN §4 "Turn").

A turn claims its branch, snapshots user edits as `user-edit`, streams the model's reply,
runs tool batches (each ended by a `tool-batch` checkpoint) and ends with a `turn` commit.
Git work runs on the session's worker thread; the model stream runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.agent import orchestrate, shell
from server.agent.compaction import instructions
from server.agent.compaction import request as context_request
from server.agent.compaction.request import SYSTEM_PROMPT
from server.agent.compaction.run import compact_in_turn
from server.agent.live_runs import ActiveRun, claim_turn
from server.agent.mcp_servers import config as mcp_config
from server.agent.tools import Workspace
from server.agent.turn_changes import files_of
from server.agent.turn_context import (
    TurnContext,
    add_message,
    checkpoint_event,
    commit_turn,
    open_turn,
)
from server.agent.turn_tools import batch_summary, settle_inflight, tool_step
from server.base import crash, events
from server.base.errors import NotFound
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    FileChip,
    MessageRecord,
    ModelMessage,
    RunFields,
    RunRecord,
    Siblings,
    ToolSchema,
    Usage,
    new_message,
    to_json_bytes,
)
from server.base.results import RunStatus
from server.git.branches import is_sub
from server.git.history import history_path
from server.git.session import GitSession
from server.git.workdir.scan import WORKDIR
from server.model.client import ModelError
from server.model.endpoints import Endpoint, choice_for_call, user_endpoints
from server.store import context
from server.store.lineage import sibling_map
from server.store.locks import on_branch
from server.store.search import run_rows
from server.store.users import off_loop

if TYPE_CHECKING:
    from pathlib import Path

    from server.agent.services import Services
    from server.store.session_store import SessionHandle

log = logging.getLogger("braid")
MAX_BATCHES = 40
PARTIAL_SAVE_SECONDS = 1.0  # how often a long answer's text so far is made durable
DEFAULT_CONTEXT_TOKENS = 32_000
MAX_TEXT = 100_000
FINAL = ("COMPLETED", "ERROR", "CANCELLED", "INTERRUPTED", "REGENERATED")


def model_messages(ctx: TurnContext, budget: int = DEFAULT_CONTEXT_TOKENS,
                   send_reasoning: bool = False, tools: int = 0,
                   server_file: Path | None = None) -> list[ModelMessage]:
    """What the model is sent: the base prompt and the instructions in effect, then only
    this branch's messages after its newest summary, whole, masked or the newest that fit
    the context budget (compaction/request.build), shaped so every server accepts them
    (model/messages.py); the run record keeps what the call used."""
    if ctx.prior_sums is None:  # a context made without the branch's listing: once a turn
        ctx.prior_sums = context.sums_of(ctx.prior)
    heads = context_request.heads_of(SYSTEM_PROMPT, ctx.instructions, server_file)
    request = context_request.build(ctx.prior, ctx.prior_sums, ctx.messages, heads, budget, tools,
                               send_reasoning)
    if ctx.instructions is not None and ctx.instructions.blob_oid:
        request.use["instructions"] = ctx.instructions.blob_oid
    if len(heads) > 1 + len(ctx.instructions.texts if ctx.instructions else ()):
        request.use["server_instructions"] = True
    ctx.run["context"] = request.use
    return request.messages


async def send_message(braid: Services, user_id: str, session_id: str, text: str) -> str:
    """Start a turn on the session's current branch; returns its `run_id` at once."""
    handle = braid.store.get_owned(user_id, session_id)
    active = await start_turn(braid, handle, text)
    return active.run_id


async def start_turn(
    braid: Services, handle: SessionHandle, text: str, fields: RunFields | None = None
) -> ActiveRun:
    branch = await handle.call(lambda git: git.branch)
    needs = None if fields else context_request.check_for(
        braid, text, await offered_cost(braid, handle))

    # Claimed under a placeholder id before any git work, so two sends cannot both pass.
    async with claim_turn(braid.locks, braid.runs, handle.session_id, branch) as active:
        ctx = await handle.call(on_branch(branch, lambda git: open_turn(
            git, handle, text, fields or {}, compact_if=needs)))
        return await launch(braid, handle, ctx, active)


async def launch(
    braid: Services, handle: SessionHandle, ctx: TurnContext, active: ActiveRun
) -> ActiveRun:
    """Start driving a prepared turn in the background."""
    active.run_id = ctx.run_id
    active.ctx = ctx
    endpoint, model = braid.model.resolve(handle.meta.get("model"), handle.meta.get("endpoint"),
                                          await own_endpoints(braid, handle.user_id))
    ctx.run["model"], ctx.run["endpoint"] = model, endpoint.name
    # A sub-agent (never a fork: no siblings) goes to its model while its index rows are
    # written: with several children at once those writes queue on the one index connection.
    child = "sub_agent" in ctx.run
    if not child:
        await _index_run(braid, handle, ctx)
    braid.bus.publish(handle.session_id, events.run_started(
        ctx.run_id, ctx.run.copy(), active.branch, [m.copy() for m in ctx.messages],
        None if child else await siblings_of(braid, handle.session_id, ctx.run_id),
        # The first turn names the session: the sidebar needs redrawing only then.
        titled="session.json" in ctx.pending))
    active.task = asyncio.create_task(drive(braid, ctx, active), name=f"run-{ctx.run_id}")
    if child:  # queued on the index's connection before anything the turn writes there
        await _index_run(braid, handle, ctx)
    return active


async def _index_run(braid: Services, handle: SessionHandle, ctx: TurnContext) -> None:
    await braid.index.upsert_run(handle.session_id, ctx.run)
    await braid.index.upsert_session(handle.meta, ctx.run["updated_at"])


async def drive(braid: Services, ctx: TurnContext, active: ActiveRun) -> None:
    """The model loop. Always ends with a `turn` commit holding the run's final status."""
    status, error = "COMPLETED", None
    # The owner's own endpoints, and their MCP servers known before any listing: a call
    # resumed after a restart (_answer_resumed_calls) may name one.
    records = await off_loop(braid.users).connections(ctx.handle.user_id)
    own = user_endpoints(records)
    braid.mcp.remember(ctx.handle.session_id, ctx.handle.user_id,
                       mcp_config.user_servers(records))
    endpoint, model = braid.model.resolve(ctx.run.get("model"), ctx.run.get("endpoint"), own)
    active.started = True
    try:
        if active.stop_requested:  # cancelled between `launch` and this first step
            raise asyncio.CancelledError
        # Queued behind BRAID_ACTIVE_TURNS others, or the user's BRAID_USER_TURNS
        # (live_runs.TurnGate): a stop while
        # waiting ends the turn CANCELLED like a stop mid-stream.
        async with braid.turn_gate.slot(ctx.handle.user_id):
            if ctx.compaction is not None:
                await compact_in_turn(braid, ctx, context_request.heads_of(
                    SYSTEM_PROMPT, ctx.instructions, braid.settings.instructions_file))
            await _answer_resumed_calls(braid, ctx)
            for batch in range(MAX_BATCHES):
                reply, msg_id = await _model_call(braid, ctx, active, (endpoint, model, own),
                                                  batch)
                if not reply.tool_calls:
                    break
                await _tool_batch(braid, ctx, reply, msg_id)
            else:
                status, error = "ERROR", f"stopped after {MAX_BATCHES} tool batches"
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        status = "INTERRUPTED" if active.stop_reason == "shutdown" else "CANCELLED"
        # A shell command of this turn still running on the session thread dies with it.
        shell.kill_under(ctx.handle.path / WORKDIR)
        await braid.mcp.stop_under(ctx.handle.path / WORKDIR)  # an MCP call in flight ends
    except ModelError as e:  # already logged by the client, with the server named
        status, error = "ERROR", e.message
        if e.partial is not None and e.partial.usage:
            _add_usage(ctx.run, e.partial.usage)
    except Exception as e:  # noqa: BLE001 - any tool failure ends the run ERROR
        status, error = "ERROR", _error_text(e)
        log.warning("run %s of session %s failed: %s", ctx.run_id, ctx.handle.session_id, error)
    # From here no cancel reaches the task (ActiveRun.stop): its last commit is never dropped.
    active.finishing = True
    await settle_inflight(ctx)
    if active.partial:  # the text streamed when the call broke off
        add_message(ctx, _partial_message(ctx, active))
    await _finish(braid, ctx, active, status, error)


async def _model_call(braid: Services, ctx: TurnContext, active: ActiveRun,
                      using: tuple[Endpoint, str, dict[str, Endpoint]], batch: int
                      ) -> tuple[Any, str]:
    """One model call, streamed as `message_delta` events; its reply joins the turn."""
    endpoint, model, own = using
    sid = ctx.handle.session_id
    msg_id = ctx.run_id if not any(m["role"] == "assistant" for m in ctx.messages) \
        else new_message_id()
    active.partial, active.partial_id = "", msg_id
    saved = _PartialSaver(ctx, active)
    reply = None
    crash.at("turn.model")
    forced = endpoint.sub_tool_choice if "sub_agent" in ctx.run and endpoint.sub_tool_choice \
        else endpoint.tool_choice
    choice = choice_for_call(forced, batch)  # forced: first call only
    tools = await offered_tools(braid, ctx)
    if ctx.instructions is None:  # a context made elsewhere (a resume, a sub-agent)
        ctx.instructions = await ctx.handle.call(instructions.project)
    # Every definition offered counts in the budget (DESIGN §4 "Compaction"), built-in too.
    sent = model_messages(ctx, braid.settings.context_tokens, endpoint.send_reasoning,
                          context_request.tool_tokens(tools), braid.settings.instructions_file)
    stream = braid.model.stream(sent, tools, model=model, endpoint=endpoint.name,
                                tool_choice=choice, own=own)
    tag = sub_branch(ctx)
    async with contextlib.aclosing(stream):  # a stop closes the model's stream at once
        async for kind, value in stream:
            if active.stop_requested:  # a cancel some library swallowed: stop here
                raise asyncio.CancelledError
            if kind == "delta":
                active.partial += value
                braid.bus.publish(sid, events.message_delta(ctx.run_id, msg_id, value,
                                                            branch=tag))
                await saved.maybe()
            elif kind == "reply":
                reply = value
    assert reply is not None
    if reply.tool_calls:  # its calls' results are not on disk: a kill keeps no half of it
        await saved.drop()
    _add_usage(ctx.run, reply.usage)
    msg = new_message("assistant", ctx.run_id, reply.content,
                      tool_calls=reply.tool_calls or None, reasoning=reply.reasoning or None,
                      finish_reason=reply.finish_reason, usage=reply.usage or None)
    msg["id"] = msg_id
    active.partial = ""
    add_message(ctx, msg)
    if reply.finish_reason == "length":
        ctx.run["warning"] = ("the answer was cut off: the model reached its token "
                              "limit (finish_reason: length)")
    return reply, msg_id


async def session_tools(braid: Services, session_id: str, workdir: Path,
                        user_id: str) -> list[ToolSchema]:
    """Every tool a turn in `workdir` may be offered: the built-in ones, the sub-agents',
    the MCP servers' (the operator's and the session's owner's own; a server not seen yet
    is started to learn them)."""
    tools = Workspace.schemas(braid.settings.shell)
    if braid.settings.subagent_tools:
        tools += orchestrate.schemas()
    own = mcp_config.user_servers(await off_loop(braid.users).connections(user_id))
    return tools + [t.schema for t in await braid.mcp.tools(session_id, workdir, user_id, own)]


async def own_endpoints(braid: Services, user_id: str) -> dict[str, Endpoint]:
    """The user's own model endpoints (added on the page), read at each turn: another
    process of a team server may have changed them."""
    return user_endpoints(await off_loop(braid.users).connections(user_id))


async def offered(braid: Services, handle: SessionHandle, workdir: Path) -> list[ToolSchema]:
    """The tools a call in `workdir` is offered, less those the session switched off
    (`tools_off`)."""
    off = set(handle.meta.get("tools_off") or ())
    return [t for t in await session_tools(braid, handle.session_id, workdir, handle.user_id)
            if t["function"]["name"] not in off]


async def offered_cost(braid: Services, handle: SessionHandle) -> int:
    """What the definitions a turn on the session's workdir is offered take of the context
    budget: every one, built-in and MCP's (DESIGN §4 "Compaction")."""
    return context_request.tool_tokens(await offered(braid, handle, handle.path / WORKDIR))


async def offered_tools(braid: Services, ctx: TurnContext) -> list[ToolSchema]:
    """The tools the turn's model is offered."""
    return await offered(braid, ctx.handle, ctx.handle.path / WORKDIR)


def _partial_message(ctx: TurnContext, active: ActiveRun) -> MessageRecord:
    """The text streamed so far, as the message it would have become (same id, so the same
    history file: the reply, when it comes, takes its place)."""
    msg = new_message("assistant", ctx.run_id, active.partial, partial=True)
    msg["id"] = active.partial_id or msg["id"]
    return msg


class _PartialSaver:
    """What a model call streamed so far, written to the pending folder at most once every
    PARTIAL_SAVE_SECONDS (never a write per delta): kill -9 mid-answer leaves it for recovery
    to commit with the INTERRUPTED run, as a stop (SIGTERM) already does. A short answer is
    never written before its turn's commit."""

    def __init__(self, ctx: TurnContext, active: ActiveRun) -> None:
        self.ctx, self.active = ctx, active
        self.rel = history_path(ctx.next_seq, "assistant", active.partial_id, ctx.legacy)
        self.due = time.monotonic() + PARTIAL_SAVE_SECONDS
        self.written = False

    async def maybe(self) -> None:
        if time.monotonic() < self.due:
            return
        data, rel = to_json_bytes(_partial_message(self.ctx, self.active)), self.rel
        run_data = self._record(len(self.ctx.messages) + 1)  # its count holds the partial

        def write(git: GitSession) -> None:
            git.pending.write(rel, data)
            git.pending.write(self.ctx.run_file, run_data)

        await self.ctx.handle.call(write)
        self.written = True
        self.due = time.monotonic() + PARTIAL_SAVE_SECONDS

    def _record(self, count: int) -> bytes:
        # Newer than the committed record: recovery takes the pending one (find_record).
        return to_json_bytes({**self.ctx.run, "message_count": count, "updated_at": now_iso()})

    async def drop(self) -> None:
        if not self.written:
            return
        rel, run_data = self.rel, self._record(len(self.ctx.messages))

        def undo(git: GitSession) -> None:
            git.pending.drop([rel])
            git.pending.write(self.ctx.run_file, run_data)

        await self.ctx.handle.call(undo)


def sub_branch(ctx: TurnContext) -> str | None:
    """A sub-agent's run events carry its branch (the page's live cards and lanes)."""
    return str(ctx.run.get("branch")) if "sub_agent" in ctx.run else None


async def _answer_resumed_calls(braid: Services, ctx: TurnContext) -> None:
    """A resumed run whose last batch holds a `spawn_sub_agents` or `merge_branches` call a
    kill left unanswered: that batch's open calls run again (orchestrate.py: its journal
    keeps finished children from running twice), then the loop goes on."""
    open_calls = orchestrate.open_calls(ctx.messages)
    if not open_calls:
        return
    for call in open_calls:
        result = await tool_step(braid, ctx, call, launch)
        braid.bus.publish(ctx.handle.session_id, events.tool_result(ctx.run_id, result))
    await _checkpoint_event(braid, ctx, "tool-batch", "Tools resumed")


async def _tool_batch(braid: Services, ctx: TurnContext, reply: Any, msg_id: str) -> None:
    """The reply's tool calls, one after the other, then a checkpoint (`BRAID_CHECKPOINT`:
    one per batch, or per call)."""
    sid = ctx.handle.session_id
    mode = braid.settings.checkpoint
    tag = sub_branch(ctx)
    for call in reply.tool_calls:
        braid.bus.publish(sid, events.tool_call(ctx.run_id, call, msg_id, branch=tag))
    for call in reply.tool_calls:
        result = await tool_step(braid, ctx, call, launch)
        braid.bus.publish(sid, events.tool_result(ctx.run_id, result, branch=tag))
        if mode == "tools":
            await _checkpoint_event(braid, ctx, "tool-batch", "Tool call")
    if mode in ("tool-batch", "tools") and (ctx.pending or ctx.changed):
        await _checkpoint_event(braid, ctx, "tool-batch", batch_summary(reply))


async def _finish(
    braid: Services, ctx: TurnContext, active: ActiveRun, status: str, error: str | None
) -> None:
    sid = ctx.handle.session_id
    ctx.run["status"] = status
    ctx.run["error"] = error
    files: list[FileChip] = []
    siblings = None
    try:
        try:
            commit_id = await _close_and_commit(ctx, status)
        except Exception as e:  # noqa: BLE001 - the turn must still end with its event
            log.exception("the last commit of run %s failed", ctx.run_id)
            status, error = "ERROR", f"could not commit the turn: {_error_text(e)}"
            ctx.run.update({"status": status, "error": error})
            # Its messages and record at least: the files it could not take stay on disk
            # for the next turn's user-edit snapshot.
            ctx.changed.clear()
            commit_id = await _close_and_commit(ctx, status)
        braid.bus.publish(sid, checkpoint_event(ctx, commit_id, "turn"))
        # Its messages' words for search (store/search.py), before the record says it ended:
        # a kill in between leaves the run RUNNING in the index, and recovery adds them.
        await braid.search.add(run_rows(sid, ctx.run_id, ctx.messages))
        await braid.index.upsert_run(sid, ctx.run)
        # Writing the index costs O(files in the repo), once per turn: before the end event,
        # so `git status` in the session folder is true when the client hears of it (D6).
        await ctx.handle.call(lambda git: git.index.flush())
        files, siblings = await _end_extras(braid, ctx)
    except Exception:  # noqa: BLE001 - the end event below is sent whatever failed
        log.exception("run %s ended without its last commit", ctx.run_id)
    finally:
        await braid.runs.end(active)
    braid.bus.publish(sid, events.run_ended(
        status, ctx.run_id, ctx.run.copy(), [m.copy() for m in ctx.messages], files=files,
        siblings=siblings, branch=sub_branch(ctx), error=error))
    braid.bus.publish(sid, events.dag_changed(run_id=ctx.run_id))
    braid.packer.touch(sid, ctx.handle.path)


async def _end_extras(braid: Services, ctx: TurnContext) -> tuple[list[FileChip],
                                                                 Siblings | None]:
    """The turn's chips and its `‹ 2/3 ›` place, for its end event: read once here rather
    than by every tab that renders it."""
    try:
        branch = ctx.run.get("branch")
        files = await ctx.handle.call(lambda git: files_of(git, ctx.run_id, branch))
        return files, await siblings_of(braid, ctx.handle.session_id, ctx.run_id)
    except Exception:  # noqa: BLE001 - the event goes out without them
        log.exception("the chips of run %s could not be read", ctx.run_id)
        return [], None


async def _close_and_commit(ctx: TurnContext, status: str) -> str:
    _answer_open_calls(ctx, status)
    return await commit_turn(ctx, "turn", _final_summary(ctx, status), finishing=True)


def _answer_open_calls(ctx: TurnContext, status: str = "") -> None:
    # A run stopped mid-batch must not leave a tool call without its result: the model API
    # rejects such a history when the branch is continued. Except a spawn or merge cut off
    # by a stopping server: resuming the run runs it again (orchestrate.open_calls).
    answered = {m.get("tool_call_id") for m in ctx.messages if m["role"] == "tool"}
    for msg in list(ctx.messages):
        for call in msg.get("tool_calls") or ():
            if status == "INTERRUPTED" and \
                    (call.get("function") or {}).get("name") in orchestrate.NAMES:
                continue
            if call.get("id") not in answered:
                add_message(ctx, new_message(
                    "tool", ctx.run_id, "error: the run stopped before this tool ran",
                    tool_call_id=call.get("id", ""),
                    name=(call.get("function") or {}).get("name"), is_error=True))


async def _checkpoint_event(braid: Services, ctx: TurnContext, kind: str, summary: str) -> None:
    commit_id = await commit_turn(ctx, kind, summary)
    braid.bus.publish(ctx.handle.session_id, checkpoint_event(ctx, commit_id, kind))


async def siblings_of(braid: Services, session_id: str, run_id: str) -> Siblings | None:
    """The run's place among its sibling runs (`‹ 2/3 ›`), for its events' payloads: read
    from the session's forks only, so it costs what was forked, not the session's runs."""
    return sibling_map(await braid.index.lineage_runs(session_id)).get(run_id)


def _add_usage(run: RunRecord, usage: Usage) -> None:
    total = run.setdefault("usage", {})
    if "prompt_tokens" in usage:
        total["prompt_tokens"] = int(total.get("prompt_tokens", 0)) + int(usage["prompt_tokens"])
    if "completion_tokens" in usage:
        total["completion_tokens"] = (int(total.get("completion_tokens", 0))
                                      + int(usage["completion_tokens"]))
    if "estimated" in usage:
        total["estimated"] = bool(total.get("estimated")) or bool(usage["estimated"])


def _final_summary(ctx: TurnContext, status: str) -> str:
    first = next((m for m in ctx.messages if m["role"] == "user"), None)
    text = (first["content"] if first else None) or ""
    head = text.strip().splitlines()[0][:60] if text.strip() else "turn"
    return f"Turn: {head}" if status == "COMPLETED" else f"Turn {status.lower()}: {head}"


def _error_text(e: BaseException) -> str:
    message = getattr(e, "message", None) or str(e) or type(e).__name__
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner, dict) and inner.get("message"):
            message = str(inner["message"])
    status = getattr(e, "status_code", None)
    return f"model error {status}: {message}" if status else message


async def cancel_run(braid: Services, user_id: str, session_id: str,
                     run_id: str | None = None) -> RunStatus:
    """Stop `run_id` (none: the run the user is watching) and wait for it to end."""
    handle = braid.store.get_owned(user_id, session_id)
    live = braid.runs.for_session(handle.session_id)
    if run_id is not None:
        live = [a for a in live if a.run_id == run_id]
        if not live and braid.team is not None:  # driven by another process?
            remote = await braid.team.cancel_remote(handle.session_id, run_id)
            if remote is not None:
                return remote
        if not live:
            runs = await braid.index.list_runs(handle.session_id)
            known = next((r for r in runs if r["run_id"] == run_id), None)
            if known is None:
                raise NotFound(f"no run {run_id}")
            return {"run_id": run_id, "status": known["status"]}
    if not live and braid.team is not None:
        remote = await braid.team.cancel_remote(handle.session_id, None)
        if remote is not None:
            return remote
    if not live:
        raise NotFound("no run is going on in this session")
    # Without a run id, stop what the user is watching rather than a sub-agent.
    active = next((a for a in live if not is_sub(a.branch)), live[0])
    active.stop("cancel")
    await active.done.wait()
    runs = await braid.index.list_runs(handle.session_id)
    status = next((r["status"] for r in runs if r["run_id"] == active.run_id), "CANCELLED")
    return {"run_id": active.run_id, "status": status}


# Made in turn_context.py and live_runs.py; imported from here by the features that open
# and run turns.
__all__ = ["FINAL", "MAX_TEXT", "cancel_run", "drive", "launch", "send_message", "start_turn"]
