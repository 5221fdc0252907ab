"""Turns: one user input and the model loop that answers it (DESIGN §4 "Turn").

A turn claims its branch, snapshots user edits as `user-edit`, streams the model's reply,
runs tool batches (each ended by a `tool-batch` checkpoint) and ends with a `turn` commit.
Git work runs on the session's worker thread; the model stream runs on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import context, crash, guarded, names, proctree
from .endpoints import choice_for_call
from .errors import Busy, NotFound
from .git_session import DISK, WORKDIR, GitSession, history_path, to_json_bytes
from .ids import new_message_id, now_iso
from .lineage import sibling_map
from .model_client import ModelError
from .model_messages import arguments_error, to_model
from .shell import on_own_thread
from .tools import ToolResult, Workspace
from .turn_changes import files_of

if TYPE_CHECKING:
    from .braid import Braid
    from .store import SessionHandle

log = logging.getLogger("braid.turns")
SYSTEM_PROMPT = (
    "You are Braid's agent. You work on the files of this session's workdir with your tools "
    "(read_file, list_files, write_file, edit_file, apply_patch, delete_file, and shell when "
    "enabled); paths are relative to the workdir. Every turn is checkpointed in git, so the "
    "user can revert what you did. Answer concisely in Markdown."
)
log = logging.getLogger("braid")
MAX_BATCHES = 40
DEFAULT_CONTEXT_TOKENS = 32_000
BULK_EDITS = 300
MAX_TEXT = 100_000
FINAL = ("COMPLETED", "ERROR", "CANCELLED", "INTERRUPTED", "REGENERATED")


@dataclass
class ActiveRun:
    session_id: str
    run_id: str
    branch: str
    task: asyncio.Task[None] | None = None
    # Why the task was cancelled: "cancel" (the user) or "shutdown" (the server).
    stop_reason: str = "cancel"
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # What a page opened mid-run shows: the turn so far and the text streaming now.
    ctx: TurnContext | None = None
    partial: str = ""
    # Where the task is: a cancel must neither hit a task before its first step (it would
    # run none of its code, so never commit nor free its branch) nor one committing its end.
    started: bool = False
    finishing: bool = False
    stop_requested: bool = False

    def stop(self, reason: str) -> None:
        """Ask the turn to stop: cancel it while the model or a tool runs; a turn not yet
        started stops at its first step; one already committing its end is let finish."""
        self.stop_reason = reason
        self.stop_requested = True
        task = self.task
        if task is not None and self.started and not self.finishing and not task.done():
            task.cancel()


class RunRegistry:
    """Which runs are live. One run at a time per (session, branch)."""

    def __init__(self) -> None:
        self._by_branch: dict[tuple[str, str], ActiveRun] = {}

    def claim(self, session_id: str, branch: str, run_id: str) -> ActiveRun:
        if (session_id, branch) in self._by_branch:
            raise Busy(f"a run is already going on branch {branch}")
        active = self._by_branch[(session_id, branch)] = ActiveRun(session_id, run_id, branch)
        return active

    def release(self, active: ActiveRun) -> None:
        if self._by_branch.get((active.session_id, active.branch)) is active:
            del self._by_branch[(active.session_id, active.branch)]
        active.done.set()

    def for_session(self, session_id: str) -> list[ActiveRun]:
        return [a for (sid, _), a in self._by_branch.items() if sid == session_id]

    def foreground(self, session_id: str) -> list[ActiveRun]:
        """Live runs the user is watching: sub-agents run on their own `sub_` branches."""
        return [a for a in self.for_session(session_id) if not a.branch.startswith("sub_")]

    def find(self, session_id: str, run_id: str) -> ActiveRun | None:
        for active in self.for_session(session_id):
            if active.run_id == run_id:
                return active
        return None

    def all(self) -> list[ActiveRun]:
        return list(self._by_branch.values())


@dataclass
class TurnContext:
    """What a live turn carries between its model calls and its checkpoints."""

    handle: SessionHandle
    run: dict[str, Any]
    run_file: str
    prior: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    next_seq: int
    pending: dict[str, bytes] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    tool_calls: int = 0
    legacy: bool = False  # the branch's history is in the earlier layout (history.py)
    # A tool call the turn was stopped during: its result joins before the last commit.
    inflight: tuple[dict[str, Any], asyncio.Future[Any]] | None = None

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def snapshot_user_edits(git: GitSession) -> str | None:
    """Commit what the user changed in workdir/ since HEAD as `user-edit`, so it is never
    attributed to, or clobbered by, a turn."""
    dirty, unnamed = names.split(git.changed_workdir_paths())
    if unnamed:
        log.warning("left out of the user-edit commit (not UTF-8): %s",
                    ", ".join(names.shown(p) for p in unnamed))
    if not dirty:
        return None
    listed = ", ".join(p[len(WORKDIR) + 1:] for p in dirty[:5])
    more = f" and {len(dirty) - 5} more" if len(dirty) > 5 else ""
    summary = f"User edits: {listed}{more}"
    if len(dirty) > BULK_EDITS:  # a folder dropped in: one `git add -A`, as git would
        return str(git.commit_workdir(summary=summary, kind="user-edit"))
    oid = git.write_checkpoint({p: DISK for p in dirty}, summary=summary, kind="user-edit")
    return str(oid)


def new_message(role: str, run_id: str, content: str | None, **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "id": new_message_id(), "role": role, "content": content,
        "run_id": run_id, "created_at": now_iso(),
    }
    msg.update({k: v for k, v in extra.items() if v is not None})
    return msg


def add_message(ctx: TurnContext, msg: dict[str, Any]) -> None:
    path = history_path(ctx.next_seq, msg["role"], msg["id"], ctx.legacy)
    ctx.next_seq += 1
    ctx.messages.append(msg)
    ctx.pending[path] = to_json_bytes(msg)


def _prepare_new_turn(
    git: GitSession, handle: SessionHandle, text: str, fields: dict[str, Any],
    notes: tuple[str, ...] = (),
) -> TurnContext:
    snapshot_user_edits(git)
    crash.at("turn.prepare")
    run_id = new_message_id()
    run = {
        "run_id": run_id, "session_id": handle.session_id, "status": "RUNNING",
        "branch": git.branch, "model": None, "usage": {}, "created_at": now_iso(),
        "updated_at": now_iso(), "forked_from_run_id": None, "forked_from_message_index": None,
        "regenerated_from": None, "error": None, "message_count": 0, "parent_run_id": None,
    }
    run.update(fields)
    ctx = TurnContext(
        handle=handle, run=run, run_file=git.new_run_path(run_id),
        prior=git.history_messages(), messages=[], next_seq=git.next_seq(),
        legacy=git.legacy_history(),
    )
    for note in notes:  # system messages that open the turn (a merge turn's note)
        add_message(ctx, new_message("system", run_id, note))
    add_message(ctx, new_message("user", run_id, text))
    if not handle.meta.get("title"):
        handle.meta["title"] = text.strip().splitlines()[0][:60] if text.strip() else "Untitled"
        ctx.pending["session.json"] = to_json_bytes(handle.meta)
    write_pending_to_disk(git, ctx)
    return ctx


def write_pending_to_disk(git: GitSession, ctx: TurnContext) -> None:
    # Written before the model is called, so a server killed mid-turn leaves the user's
    # message and a RUNNING record on disk for recovery to commit.
    ctx.run["message_count"] = len(ctx.messages)
    files = dict(ctx.pending)
    files[ctx.run_file] = to_json_bytes(ctx.run)
    for rel, data in files.items():
        # Atomic (a kill leaves no half record), and replaced, never changed in place: a
        # fork hard-links its source's history files.
        guarded.write(git.path, rel, data)


def checkpoint_changes(ctx: TurnContext) -> tuple[dict[str, Any], int]:
    """On the loop: what the turn's next checkpoint writes (its new messages, its record,
    the files its tools changed) and the message index it holds."""
    ctx.run["message_count"] = len(ctx.messages)
    ctx.run["updated_at"] = now_iso()
    changes: dict[str, Any] = dict(ctx.pending)
    changes[ctx.run_file] = to_json_bytes(ctx.run)
    for rel in ctx.changed:
        changes[f"{WORKDIR}/{rel}"] = DISK
    return changes, len(ctx.messages)


def write_turn_commit(git: GitSession, run_id: str, changes: dict[str, Any], index: int,
                      kind: str, summary: str) -> str:
    """On the session thread: the checkpoint commit; the turn's state is not touched."""
    crash.at("turn.checkpoint")
    oid = git.write_checkpoint(changes, summary=summary, kind=kind, run_id=run_id,
                               message_index=index, sync_index=False)
    return str(oid)


async def commit_turn(ctx: TurnContext, kind: str, summary: str, *,
                      finishing: bool = False) -> str:
    """A checkpoint of a live turn: taken from its state on the loop, committed on the
    session thread, and only then the taken changes are cleared (on the loop again)."""
    changes, index = checkpoint_changes(ctx)
    run_id = ctx.run_id

    def work(git: GitSession) -> str:
        if finishing:
            crash.at("turn.finish")
        return write_turn_commit(git, run_id, changes, index, kind, summary)

    oid = await ctx.handle.call(work)
    ctx.pending.clear()
    ctx.changed.clear()
    return oid


def model_messages(ctx: TurnContext, budget: int = DEFAULT_CONTEXT_TOKENS,
                   send_reasoning: bool = False) -> list[dict[str, Any]]:
    """What the model is sent: the base prompt, then only this branch's messages, the newest
    that fit the context budget (context.py), shaped so every server accepts them
    (model_messages.py); the run record keeps what the call used."""
    sent, used = context.fit((ctx.prior, ctx.messages), budget,
                             context.estimate({"content": SYSTEM_PROMPT}))
    ctx.run["context"] = dict(used, budget=budget)
    out = to_model(sent, SYSTEM_PROMPT, send_reasoning)
    if used["omitted_messages"]:
        out.insert(1, {"role": "system", "content": context.note_text(used["omitted_messages"])})
    return out


async def send_message(braid: Braid, user_id: str, session_id: str, text: str) -> str:
    """Start a turn on the session's current branch; returns its `run_id` at once."""
    handle = braid.store.get_owned(user_id, session_id)
    active = await start_turn(braid, handle, text)
    return active.run_id


async def start_turn(
    braid: Braid, handle: SessionHandle, text: str, fields: dict[str, Any] | None = None
) -> ActiveRun:
    branch = await handle.call(lambda git: git.branch)
    # Claimed under a placeholder id before any git work, so two sends cannot both pass.
    active = braid.runs.claim(handle.session_id, branch, "")

    def prepare(git: GitSession) -> TurnContext:
        # A fork or a checkout queued before this may have switched the session's branch.
        if git.branch != branch:
            raise Busy(f"the session switched from branch {branch} to {git.branch}")
        return _prepare_new_turn(git, handle, text, fields or {})

    try:
        ctx = await handle.call(prepare)
    except BaseException:
        braid.runs.release(active)
        raise
    return await launch(braid, handle, ctx, active)


async def launch(
    braid: Braid, handle: SessionHandle, ctx: TurnContext, active: ActiveRun
) -> ActiveRun:
    """Start driving a prepared turn in the background."""
    active.run_id = ctx.run_id
    active.ctx = ctx
    endpoint, model = braid.model.resolve(handle.meta.get("model"), handle.meta.get("endpoint"))
    ctx.run["model"], ctx.run["endpoint"] = model, endpoint.name
    await braid.index.upsert_run(handle.session_id, ctx.run)
    await braid.index.upsert_session(handle.meta, ctx.run["updated_at"])
    braid.bus.publish(handle.session_id, "run_started", {
        "run_id": ctx.run_id, "run": dict(ctx.run), "branch": active.branch,
        "messages": [dict(m) for m in ctx.messages],
        "siblings": await siblings_of(braid, handle.session_id, ctx.run_id),
        # The first turn names the session: the sidebar needs redrawing only then.
        "titled": "session.json" in ctx.pending,
    })
    active.task = asyncio.create_task(drive(braid, ctx, active), name=f"run-{ctx.run_id}")
    return active


async def drive(braid: Braid, ctx: TurnContext, active: ActiveRun) -> None:
    """The model loop. Always ends with a `turn` commit holding the run's final status."""
    handle = ctx.handle
    sid = handle.session_id
    status, error = "COMPLETED", None
    partial = ""
    mode = braid.settings.checkpoint
    tools = Workspace.schemas(braid.settings.shell)
    endpoint, model = braid.model.resolve(ctx.run.get("model"), ctx.run.get("endpoint"))
    active.started = True
    try:
        if active.stop_requested:  # cancelled between `launch` and this first step
            raise asyncio.CancelledError
        for batch in range(MAX_BATCHES):
            msg_id = ctx.run_id if not any(m["role"] == "assistant" for m in ctx.messages) \
                else new_message_id()
            partial = ""
            reply = None
            crash.at("turn.model")
            choice = choice_for_call(endpoint.tool_choice, batch)  # forced: first call only
            sent = model_messages(ctx, braid.settings.context_tokens, endpoint.send_reasoning)
            stream = braid.model.stream(sent, tools, model=model, endpoint=endpoint.name,
                                        tool_choice=choice)
            async for kind, value in stream:
                if kind == "delta":
                    partial += value
                    active.partial = partial
                    braid.bus.publish(sid, "message_delta", {
                        "run_id": ctx.run_id, "message_id": msg_id, "delta": value})
                elif kind == "reply":
                    reply = value
            assert reply is not None
            _add_usage(ctx.run, reply.usage)
            msg = new_message("assistant", ctx.run_id, reply.content,
                              tool_calls=reply.tool_calls or None,
                              reasoning=reply.reasoning or None,
                              finish_reason=reply.finish_reason, usage=reply.usage or None)
            msg["id"] = msg_id
            partial = active.partial = ""
            add_message(ctx, msg)
            if reply.finish_reason == "length":
                ctx.run["warning"] = ("the answer was cut off: the model reached its token "
                                      "limit (finish_reason: length)")
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                braid.bus.publish(sid, "tool_call", {"run_id": ctx.run_id, "call": call,
                                                     "message_id": msg_id})
            for call in reply.tool_calls:
                result = await _tool_step(braid, ctx, call)
                braid.bus.publish(sid, "tool_result", {"run_id": ctx.run_id, "message": result})
                if mode == "tools":
                    await _checkpoint_event(braid, ctx, "tool-batch", "Tool call")
            if mode in ("tool-batch", "tools") and (ctx.pending or ctx.changed):
                await _checkpoint_event(braid, ctx, "tool-batch", _batch_summary(reply))
        else:
            status, error = "ERROR", f"stopped after {MAX_BATCHES} tool batches"
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        status = "INTERRUPTED" if active.stop_reason == "shutdown" else "CANCELLED"
        # A shell command of this turn still running on the session thread dies with it.
        proctree.kill_under(handle.path / WORKDIR)
    except ModelError as e:  # already logged by the client, with the server named
        status, error = "ERROR", e.message
        if e.partial is not None and e.partial.usage:
            _add_usage(ctx.run, e.partial.usage)
    except Exception as e:  # noqa: BLE001 - any tool failure ends the run ERROR
        status, error = "ERROR", _error_text(e)
        log.warning("run %s of session %s failed: %s", ctx.run_id, sid, error)
    # From here no cancel reaches the task (ActiveRun.stop): its last commit is never dropped.
    active.finishing = True
    await _settle_inflight(ctx)
    if partial:
        add_message(ctx, new_message("assistant", ctx.run_id, partial, partial=True))
    await _finish(braid, ctx, active, status, error)


async def _finish(
    braid: Braid, ctx: TurnContext, active: ActiveRun, status: str, error: str | None
) -> None:
    sid = ctx.handle.session_id
    ctx.run["status"] = status
    ctx.run["error"] = error
    files: list[dict[str, str]] = []
    siblings = None
    try:
        try:
            commit_id = await _close_and_commit(ctx, status)
        except Exception as e:  # noqa: BLE001 - the turn must still end with its event
            log.exception("the last commit of run %s failed", ctx.run_id)
            status, error = "ERROR", f"could not commit the turn: {_error_text(e)}"
            ctx.run.update(status=status, error=error)
            # Its messages and record at least: the files it could not take stay on disk
            # for the next turn's user-edit snapshot.
            ctx.changed.clear()
            commit_id = await _close_and_commit(ctx, status)
        braid.bus.publish(sid, "checkpoint", {"run_id": ctx.run_id, "commit_id": commit_id,
                                              "kind": "turn"})
        await braid.index.upsert_run(sid, ctx.run)
        # Writing the index costs O(files in the repo), once per turn: before the end event,
        # so `git status` in the session folder is true when the client hears of it (D6).
        await ctx.handle.call(lambda git: git.flush_index())
        files, siblings = await _end_extras(braid, ctx)
    except Exception:  # noqa: BLE001 - the end event below is sent whatever failed
        log.exception("run %s ended without its last commit", ctx.run_id)
    finally:
        braid.runs.release(active)
    event = {"COMPLETED": "run_completed", "ERROR": "run_error"}.get(status, "run_cancelled")
    data: dict[str, Any] = {"run_id": ctx.run_id, "run": dict(ctx.run), "status": status,
                            "messages": [dict(m) for m in ctx.messages], "files": files,
                            "siblings": siblings}
    if error:
        data["error"] = error
    braid.bus.publish(sid, event, data)
    braid.bus.publish(sid, "dag_changed", {"run_id": ctx.run_id})
    braid.packer.touch(sid, ctx.handle.path)


async def _end_extras(braid: Braid, ctx: TurnContext) -> tuple[list[dict[str, str]],
                                                                 dict[str, Any] | None]:
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
    _answer_open_calls(ctx)
    return await commit_turn(ctx, "turn", _final_summary(ctx, status), finishing=True)


def _answer_open_calls(ctx: TurnContext) -> None:
    # A run stopped mid-batch must not leave a tool call without its result: the model API
    # rejects such a history when the branch is continued.
    answered = {m.get("tool_call_id") for m in ctx.messages if m["role"] == "tool"}
    for msg in list(ctx.messages):
        for call in msg.get("tool_calls") or ():
            if call.get("id") not in answered:
                add_message(ctx, new_message(
                    "tool", ctx.run_id, "error: the run stopped before this tool ran",
                    tool_call_id=call.get("id", ""),
                    name=(call.get("function") or {}).get("name"), is_error=True))


async def _checkpoint_event(braid: Braid, ctx: TurnContext, kind: str, summary: str) -> None:
    commit_id = await commit_turn(ctx, kind, summary)
    braid.bus.publish(ctx.handle.session_id, "checkpoint",
                      {"run_id": ctx.run_id, "commit_id": commit_id, "kind": kind})


@dataclass
class ToolOutcome:
    """What one tool call did, handed from its lane back to the loop, which alone writes it
    into the turn's state (`TurnContext`)."""

    content: str
    is_error: bool
    changed: list[str]


async def _tool_step(braid: Braid, ctx: TurnContext, call: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call and record its result message. The work goes on in its own task: a
    cancel stops the turn here, and `_settle_inflight` takes the call's result before the
    turn's last commit (a shell command is killed meanwhile; a file tool has written)."""
    work = asyncio.ensure_future(run_tool(braid, ctx, call))
    try:
        outcome = await asyncio.shield(work)
    except asyncio.CancelledError:
        ctx.inflight = (call, work)
        raise
    return record_tool(ctx, call, outcome)


async def _settle_inflight(ctx: TurnContext) -> None:
    if ctx.inflight is None:
        return
    call, work = ctx.inflight
    ctx.inflight = None
    try:
        outcome = await work
    except Exception:  # noqa: BLE001 - the call then gets the "stopped" error result
        log.exception("a tool call of run %s failed while it was stopped", ctx.run_id)
        return
    record_tool(ctx, call, outcome)


async def run_tool(braid: Braid, ctx: TurnContext, call: dict[str, Any]) -> ToolOutcome:
    """One tool call: a file tool on the session thread (it writes files and backs them up);
    a shell command on a thread of its own, then one look at what it changed on the
    session thread. Reads the turn's state; never writes it."""
    crash.at("turn.tool")
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")
    bad_args = arguments_error(fn.get("arguments"))
    handle, run_id = ctx.handle, ctx.run_id
    if name != "shell":
        if bad_args:
            return ToolOutcome(bad_args, True, [])
        return await handle.call(lambda git: _file_tool(braid, git, run_id, name, fn))
    workspace = Workspace(handle.path / WORKDIR, shell_enabled=braid.settings.shell,
                          shell_timeout=braid.settings.shell_timeout)
    result = ToolResult(bad_args, is_error=True) if bad_args else await on_own_thread(
        lambda: workspace.execute(name, fn.get("arguments") or "{}"),
        f"shell-{handle.session_id[:8]}")
    known = sorted(ctx.changed)
    return await handle.call(lambda git: _after_shell(braid, git, run_id, known, result))


def _file_tool(braid: Braid, git: GitSession, run_id: str, name: str,
               fn: dict[str, Any]) -> ToolOutcome:
    def before_write(rel: str) -> None:
        for hook in braid.before_write_hooks:
            hook(git, run_id, str(git.path / WORKDIR / rel))

    workspace = Workspace(git.path / WORKDIR, before_write=before_write,
                          shell_enabled=braid.settings.shell,
                          shell_timeout=braid.settings.shell_timeout)
    result = workspace.execute(name, fn.get("arguments") or "{}")
    return ToolOutcome(result.content, result.is_error, list(result.changed))


def _after_shell(braid: Braid, git: GitSession, run_id: str, known: list[str],
                 result: ToolResult) -> ToolOutcome:
    # A shell command may change anything: found by one status scan, after it ran.
    dirty, unnamed = names.split(git.changed_workdir_paths())
    changed = [rel[len(WORKDIR) + 1:] for rel in dirty]
    content, is_error = result.content, result.is_error
    if unnamed:
        content += "\n" + names.refusal([p[len(WORKDIR) + 1:] for p in unnamed])
        is_error = True
    for hook in braid.after_shell_hooks:
        hook(git, run_id, sorted({*known, *changed}))
    return ToolOutcome(content, is_error, changed)


def record_tool(ctx: TurnContext, call: dict[str, Any], outcome: ToolOutcome) -> dict:
    """On the loop: the call's changed paths and its result message join the turn."""
    ctx.changed.update(outcome.changed)
    ctx.tool_calls += 1
    name = str((call.get("function") or {}).get("name") or "")
    msg = new_message("tool", ctx.run_id, outcome.content, tool_call_id=call.get("id", ""),
                      name=name, is_error=outcome.is_error or None)
    add_message(ctx, msg)
    return msg


async def siblings_of(braid: Braid, session_id: str, run_id: str) -> dict[str, Any] | None:
    """The run's place among its sibling runs (`‹ 2/3 ›`), for its events' payloads."""
    return sibling_map(await braid.index.list_runs(session_id)).get(run_id)


def _add_usage(run: dict[str, Any], usage: dict[str, Any]) -> None:
    total = run.setdefault("usage", {})
    for key, value in usage.items():
        if key == "estimated":
            total["estimated"] = bool(total.get("estimated")) or bool(value)
        elif isinstance(value, int | float):
            total[key] = int(total.get(key, 0)) + int(value)


def _batch_summary(reply: Any) -> str:
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


def _final_summary(ctx: TurnContext, status: str) -> str:
    first = next((m for m in ctx.messages if m["role"] == "user"), None)
    text = (first or {}).get("content") or ""
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


async def cancel_run(braid: Braid, user_id: str, session_id: str,
                     run_id: str | None = None) -> dict[str, Any]:
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
    active = next((a for a in live if not a.branch.startswith("sub_")), live[0])
    active.stop("cancel")
    await active.done.wait()
    runs = await braid.index.list_runs(handle.session_id)
    status = next((r["status"] for r in runs if r["run_id"] == active.run_id), "CANCELLED")
    return {"run_id": active.run_id, "status": status}
