"""The agent branches itself (DESIGN §4): the model's `spawn_sub_agents` and `merge_branches`
tools, off with `BRAID_SUBAGENT_TOOLS=off`.

`spawn_sub_agents` first commits the run's state so far (a `tool-batch` checkpoint: the
children branch from what the parent has done), then journals the call in the parent's run
record (`spawn`: each child's label, prompt and branch, then its run id and status as it goes)
before any branch is made, and writes that record again as each child starts and ends. The
children run in parallel, at most `BRAID_SUBAGENTS_PARALLEL` at once, each a sub-agent on its
own `sub_…` branch (made here) in its own worktree (`run_child`, here), driven as any turn is:
by the driver's own `launch` (turns.py), which the driver passes down with the call (it
imports this module, so this one cannot import it); while they run the parent gives its
turn slot back (`TurnGate.lend`). A child is refused past
`BRAID_SUBAGENT_DEPTH` levels below the user's run, as a tool result the model reads.

Stop and crash: a parent asked to stop stops its children (same reason) and records their
statuses; a child stopped alone ends CANCELLED and the call goes on. After kill -9 the
parent's record (committed INTERRUPTED by recovery) holds the journal; resuming the parent
(`continue_run`) finds the call unanswered (`turns._answer_resumed_calls`) and runs it again:
children the journal shows finished are not run again, interrupted ones resume in place,
ones never started start.

`merge_branches` merges into the branch the model runs on as one of the turn's checkpoints
(`merge_in_turn`, planned by git/merge3.py as the user's merge is), a multi-parent `merge`
commit; with `fail` and conflicts it returns them and changes nothing. A resumed call whose
merge was already made returns that merge. A sub-agent branch whose last run the user
stopped (CANCELLED) is left out (named in the result's `skipped`; refused when nothing else
is left): the user said no to that work, and the model passes on every branch the spawn
returned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.agent.interrupted import recover_worktree
from server.agent.live_runs import ActiveRun, claim_turn
from server.agent.turn_changes import files_of
from server.agent.turn_context import (
    TurnContext,
    checkpoint_event,
    commit_turn,
    open_turn,
    resume_in_place,
    write_pending_to_disk,
)
from server.base import crash, events
from server.base.errors import BraidError, NotFound
from server.base.ids import now_iso
from server.base.records import (
    MessageRecord,
    RunFields,
    SpawnChild,
    SpawnJournal,
    ToolCall,
    ToolSchema,
    Usage,
    to_json_bytes,
)
from server.base.results import ToolConflict, ToolMerge
from server.git import lookup
from server.git.branches import is_sub, sub_branch
from server.git.commits import commit_message, first_parent_line
from server.git.history import HISTORY, RUNS
from server.git.merge3 import STRATEGIES, plan_merge, workdir_oid
from server.git.session import WORKTREES, GitSession
from server.git.trees import empty_tree
from server.git.workdir.scan import WORKDIR
from server.store import atomic, journal
from server.store.checkpoints import locate_run
from server.store.layout import answer_of
from server.store.session_store import SessionHandle

if TYPE_CHECKING:
    from server.agent.services import Services

    # How a turn is driven (turns.launch): a child runs as any turn does, by the driver's
    # own function, handed down with the call.
    Launch = Callable[[Services, SessionHandle, TurnContext, ActiveRun], Awaitable[ActiveRun]]

log = logging.getLogger("braid.subagents")

SPAWN = "spawn_sub_agents"
MERGE = "merge_branches"
NAMES = frozenset({SPAWN, MERGE})
MAX_CHILDREN = 8
MESSAGE_SUBAGENTS = 32  # sub-agent runs one user message may start, all levels (fair shares)
MAX_PROMPT = 20_000
FINISHED = frozenset({"COMPLETED", "ERROR", "CANCELLED"})
STOP_POLL = 0.05
# Of the children's answers, what the parent's model reads (each child's whole transcript
# stays on its branch): at most 800 characters each, 3,200 in all (at least 200 each), so
# eight children's answers leave a small model's context room.
ANSWER_CHARS, ANSWERS_CHARS, ANSWER_FLOOR = 800, 3200, 200
RESULT_CHARS = 2000  # of a child's answer, kept with its result (the user's spawn's too)

SPAWN_DESCRIPTION = (
    "Run up to 8 sub-agents in parallel, each on its own git branch and worktree that starts "
    "from your files as they are now. Use it when the work splits into independent parts "
    "(different files or modules, alternative attempts) that can be done at the same time; "
    "do small or tightly coupled work yourself. A child sees ONLY its prompt: no chat "
    "history, none of your notes, so write each prompt as a complete task: the goal, the "
    "exact files to create or change, constraints, and what to report back. Give children "
    "disjoint files when you can, so their work merges without conflicts. The call returns "
    "when every child has ended: for each its label, branch, run_id, status (COMPLETED, "
    "ERROR, CANCELLED), final_text (its answer), commit_id and the files it changed. Their "
    "work stays on their branches until you call merge_branches with those branches."
)
MERGE_DESCRIPTION = (
    "Merge branches (usually those spawn_sub_agents returned) into the branch you work on, "
    "three-way, in the order given, as one merge commit. strategy: 'fail' (default) refuses "
    "on any conflict and changes nothing, returning conflicts: [{path, ours, theirs, branch}] "
    "('ours': your side with the branches merged before; 'theirs': that branch's); then "
    "either retry with 'ours' (keep your side of conflicting hunks) or 'theirs' (take the "
    "branch's), or 'agent' (conflicting files get <<<<<<< ======= >>>>>>> markers that you "
    "then fix with your file tools), or edit files yourself and retry. Success returns "
    "{commit_id, parent_ids}. A sub-agent the user stopped (CANCELLED) is never merged: "
    "its branch is left out and named in skipped."
)


def schemas() -> list[ToolSchema]:
    """The two tools' entries in a request's `tools`."""
    return [
        {"type": "function", "function": {"name": SPAWN, "description": SPAWN_DESCRIPTION,
         "parameters": {"type": "object", "properties": {"agents": {
             "type": "array", "minItems": 1, "maxItems": MAX_CHILDREN,
             "description": "The children, one per independent part of the work.",
             "items": {"type": "object", "properties": {
                 "label": {"type": "string", "maxLength": 24, "description":
                           "A short name for the child (letters, digits, dashes), e.g. "
                           "'tests' or 'parser'."},
                 "prompt": {"type": "string", "description":
                            "The child's whole task: it sees nothing else."}},
                 "required": ["label", "prompt"], "additionalProperties": False}}},
             "required": ["agents"], "additionalProperties": False}}},
        {"type": "function", "function": {"name": MERGE, "description": MERGE_DESCRIPTION,
         "parameters": {"type": "object", "properties": {
             "branches": {"type": "array", "minItems": 1, "items": {"type": "string"},
                          "description": "Branch names, as spawn_sub_agents returned them."},
             "strategy": {"type": "string", "enum": list(STRATEGIES),
                          "description": "On conflict: fail (default), ours, theirs, agent."}},
             "required": ["branches"], "additionalProperties": False}}},
    ]


def open_calls(messages: list[MessageRecord]) -> list[ToolCall]:
    """The calls of the last tool batch a kill left unanswered, when one of them is this
    module's (a resumed run runs them again: turns.py; `continue_run` resumes in place)."""
    if not messages or messages[-1]["role"] == "user":
        return []
    batch = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    calls = (batch.get("tool_calls") if batch is not None else None) or []
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    found = [c for c in calls if c.get("id") not in answered]
    if any((c.get("function") or {}).get("name") in NAMES for c in found):
        return found
    return []


class ServerStopping(Exception):
    """A spawn cut off by a stopping server: the call stays unanswered (turns.py)."""


class ToolRefused(Exception):
    """A call the model must correct: its message is the tool result."""


async def run_call(braid: Services, ctx: TurnContext, name: str, arguments: str,
                   call_id: str, launch: Launch) -> tuple[str, bool]:
    """One call of either tool: (result text, is_error). `launch`: the driver's, that a
    spawn's children are driven by."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ToolRefused("arguments must be a JSON object")
        if name == SPAWN:
            return await spawn(braid, ctx, args, call_id, launch), False
        return await merge(braid, ctx, args), False
    except ToolRefused as e:
        return f"error: {e}", True
    except BraidError as e:  # a branch not found, already merged, busy...
        return f"error: {e.message}", True


# -- spawn_sub_agents ---------------------------------------------------------------------


def _label(raw: object) -> str:
    text = re.sub(r"[^A-Za-z0-9-]+", "-", str(raw or "")).strip("-")[:24].strip("-")
    return text or "agent"


def check_agents(args: dict[str, Any]) -> list[tuple[str, str]]:
    agents = args.get("agents")
    if not isinstance(agents, list) or not agents:
        raise ToolRefused("agents must be a non-empty list of {label, prompt}")
    if len(agents) > MAX_CHILDREN:
        raise ToolRefused(f"at most {MAX_CHILDREN} agents per call; split the work")
    out = []
    for item in agents:
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) \
                or not item["prompt"].strip():
            raise ToolRefused("each agent needs a non-empty string prompt")
        out.append((_label(item.get("label")), item["prompt"][:MAX_PROMPT]))
    return out


def depth_of(ctx: TurnContext) -> int:
    """Levels below the user's run: 0 for the user's own, 1 for its children..."""
    return int((ctx.run.get("sub_agent") or {}).get("depth") or 0)


async def _checkpoint(braid: Services, ctx: TurnContext, summary: str) -> None:
    """The run's state so far as a checkpoint: what children branch from, and what a merge
    must not mix with."""
    if ctx.pending or ctx.changed:
        commit_id = await commit_turn(ctx, "tool-batch", summary)
        braid.bus.publish(ctx.handle.session_id, checkpoint_event(ctx, commit_id, "tool-batch"))


async def _write_record(ctx: TurnContext) -> None:
    """The parent's record with its journal, atomically where a killed turn's is found
    (its pending folder: recovery commits it INTERRUPTED, journal included)."""
    ctx.run["updated_at"] = now_iso()
    data, rel = to_json_bytes(ctx.run), ctx.run_file
    await ctx.handle.call(lambda git: git.pending.write(rel, data))


async def spawn(braid: Services, ctx: TurnContext, args: dict[str, Any], call_id: str,
                launch: Launch) -> str:
    wanted = check_agents(args)
    depth = depth_of(ctx) + 1
    if depth > braid.settings.subagent_depth:
        raise ToolRefused(
            f"sub-agents may be nested at most {braid.settings.subagent_depth} levels below "
            "the user's run, and you are a sub-agent at that depth: do this work yourself")
    journal = ctx.run.get("spawn")
    fresh = journal is None or journal["call_id"] != call_id  # not a resumed call
    unfinished = len(wanted) if fresh or journal is None else \
        sum(1 for c in journal["children"] if c.get("status") not in FINISHED)
    # The user's fair share (DESIGN §4): counted before any branch is made, refused as a
    # tool result the model reads. A resumed call's children were let in once already.
    refused = braid.runs.take_children(
        ctx.handle.user_id, root_run_of(ctx), unfinished,
        braid.settings.user_subagents if fresh else 0,
        MESSAGE_SUBAGENTS if fresh else 0)
    if refused:
        raise ToolRefused(f"too many sub-agents: {refused}; do this work yourself, or spawn "
                          "fewer once some have ended")
    try:
        return await _spawn(braid, ctx, wanted, call_id, depth, launch)
    finally:
        braid.runs.child_ended(ctx.handle.user_id, unfinished)


def root_run_of(ctx: TurnContext) -> str:
    """The user's run a run serves: its own id, or a sub-agent's first ancestor's."""
    return str((ctx.run.get("sub_agent") or {}).get("root_run_id") or ctx.run_id)


async def _spawn(braid: Services, ctx: TurnContext, wanted: list[tuple[str, str]],
                 call_id: str, depth: int, launch: Launch) -> str:
    journal = ctx.run.get("spawn")
    if journal is None or journal["call_id"] != call_id:  # a new call, not a resumed one
        if ctx.changed:  # children branch from the files so far (messages need no commit)
            await _checkpoint(braid, ctx, "Before sub-agents")
        journal = {"call_id": call_id, "base_commit_id": None, "children": [
            {"label": label, "prompt": prompt, "status": "PENDING", "run_id": None,
             "branch": sub_branch(ctx.run_id, label)}
            for label, prompt in wanted]}
        ctx.run["spawn"] = journal
        await _write_record(ctx)  # which children exist, before any branch is made
    else:  # resumed: a child a kill caught before its run id was journaled is found
        await _found_runs(braid, ctx, journal)
    # Kept with the next write of the journal (a child starting): a resumed call finds the
    # branches made already by their names.
    children = journal["children"]
    journal["base_commit_id"] = await ctx.handle.call(
        lambda git: open_child_branches(git, children))
    crash.at("spawn.after_branches")
    braid.bus.publish(ctx.handle.session_id,
                      events.dag_changed(branch=str(ctx.run.get("branch") or "")))
    if await _run_children(braid, ctx, journal, depth, launch) == "shutdown":
        # The server is stopping: no result, so resuming the run resumes the children.
        raise ServerStopping("the server stopped while the sub-agents ran")
    crash.at("spawn.before_result")
    return json.dumps(_result(ctx, journal))


def open_child_branches(git: GitSession, children: list[SpawnChild]) -> str:
    """On the spawning run's thread (the user's run's session, or a child's worktree): each
    child's branch from the run's current state; a branch made already (a resume) is kept.
    Returns the commit they branch from."""
    base = str(git.head_oid())
    for child in children:
        if lookup.branch_target(git.repo, child["branch"]) is None:
            base = make_sub_branch(git, child["branch"], child["label"], child["prompt"])
    return base


def make_sub_branch(git: GitSession, branch: str, label: str, prompt: str) -> str:
    """The branch's first `sub-agent` commit: HEAD's state without history/ and runs/ (the
    child starts a fresh conversation). Returns the commit it branches from (HEAD)."""
    head = git.head_commit()
    tree = lookup.without(git.repo, head.tree, (HISTORY, RUNS)).id
    first_line = prompt.strip().splitlines()[0][:80] if prompt.strip() else ""
    message = commit_message(f"Sub-agent {label}: {first_line}", "sub-agent", None, None)
    oid = git.repo.create_commit(None, git.signature, git.signature, message, tree, [head.id])
    git.create_branch(branch, oid)
    return str(head.id)


async def _found_runs(braid: Services, ctx: TurnContext, journal: SpawnJournal) -> None:
    unknown = {c["branch"]: c for c in journal["children"] if not c.get("run_id")}
    if not unknown:
        return
    for row in await braid.index.list_runs(ctx.handle.session_id):
        child = unknown.get(str(row.get("branch") or ""))
        if child is not None:
            child["run_id"], child["status"] = row["run_id"], str(row["status"])


def _result(ctx: TurnContext, journal: SpawnJournal) -> dict[str, Any]:
    agents = []
    total: Usage = {"prompt_tokens": 0, "completion_tokens": 0}
    each = max(ANSWER_FLOOR, min(ANSWER_CHARS, ANSWERS_CHARS // len(journal["children"])))
    for child in journal["children"]:
        agents.append({k: child.get(k) for k in ("label", "branch", "run_id", "status",
                                                 "commit_id")}
                      | {"final_text": str(child.get("final_text") or "")[:each]}
                      | {"files": child.get("files") or []}
                      | ({"error": child["error"]} if child.get("error") else {}))
        used: Usage = child.get("usage") or {}
        total["prompt_tokens"] = total.get("prompt_tokens", 0) + used.get("prompt_tokens", 0)
        total["completion_tokens"] = (total.get("completion_tokens", 0)
                                      + used.get("completion_tokens", 0))
    # The children's tokens, summed over the run's spawns, in the parent's record too.
    kept = ctx.run.setdefault("sub_agents_usage", {})
    kept["prompt_tokens"] = kept.get("prompt_tokens", 0) + total.get("prompt_tokens", 0)
    kept["completion_tokens"] = (kept.get("completion_tokens", 0)
                                 + total.get("completion_tokens", 0))
    return {"agents": agents, "usage": total}


def _fields(ctx: TurnContext, journal: SpawnJournal, child: SpawnChild,
            depth: int) -> RunFields:
    return {"parent_run_id": ctx.run_id, "sub_agent": {
        "branch": child["branch"], "label": child["label"],
        "parent_branch": str(ctx.run.get("branch") or ""), "parent_turn_id": ctx.run_id,
        "base_commit_id": str(journal.get("base_commit_id") or ""), "depth": depth,
        "call_id": journal["call_id"], "root_run_id": root_run_of(ctx)}}


class _Children:
    """The children of one call going to their end; a stop of the parent reaches them."""

    def __init__(self, braid: Services, ctx: TurnContext, journal: SpawnJournal,
                 depth: int, launch: Launch) -> None:
        self.braid, self.ctx, self.journal, self.depth = braid, ctx, journal, depth
        self.launch = launch
        self.slots = asyncio.Semaphore(max(1, braid.settings.subagents_parallel))
        self.stopped: list[str] = []  # the parent's stop reason, once asked
        self.saving = asyncio.Lock()

    async def save(self) -> None:
        async with self.saving:
            await _write_record(self.ctx)

    async def one(self, child: SpawnChild) -> None:
        if child.get("status") in FINISHED:
            return  # never run a finished child again
        async with self.slots:
            if self.stopped:  # the parent stopped before this child's turn came
                if self.stopped[0] != "shutdown":
                    child["status"] = "CANCELLED"
                    await self.save()
                return

            async def started(run_id: str) -> None:
                child["run_id"], child["status"] = run_id, "RUNNING"
                await self.save()

            fields = _fields(self.ctx, self.journal, child, self.depth)
            child.update(await run_child(self.braid, self.ctx.handle, child, fields, started,
                                         self.launch))
            if child.get("status") != "INTERRUPTED":  # a stopping server writes no more
                await self.save()
                crash.at("spawn.after_child")

    async def watch(self) -> None:
        sid = self.ctx.handle.session_id
        parent = self.braid.runs.find(sid, self.ctx.run_id)
        if parent is None:
            return
        await parent.stopping.wait()
        self.stopped.append(parent.stop_reason)
        branches = {c["branch"] for c in self.journal["children"]}
        while True:  # also a child claimed just as the parent stopped
            for active in self.braid.runs.for_session(sid):
                if active.branch in branches and not active.stop_requested:
                    active.stop(parent.stop_reason)
            await asyncio.sleep(STOP_POLL)


async def _run_children(braid: Services, ctx: TurnContext, journal: SpawnJournal,
                        depth: int, launch: Launch) -> str | None:
    """Every unfinished child to its end, at most BRAID_SUBAGENTS_PARALLEL at once; a stop
    of the parent is passed on to them. Returns the parent's stop reason, if it stopped."""
    children = _Children(braid, ctx, journal, depth, launch)
    watcher = asyncio.create_task(children.watch())
    try:
        async with braid.turn_gate.lend():  # children need turn slots; the parent waits
            await asyncio.gather(*(children.one(c) for c in journal["children"]))
    finally:
        watcher.cancel()
    return children.stopped[0] if children.stopped else None


# -- one child, on its own worktree -------------------------------------------------------


def add_child_worktree(git: GitSession, branch: str) -> Path:
    """On the session's own thread: the child's branch checked out under `_worktrees/` (one a
    dead process left is recovered first: its files committed, nothing lost)."""
    if branch in git.repo.list_worktrees():
        recover_worktree(git, branch)
    path = git.path / WORKTREES / branch
    path.parent.mkdir(exist_ok=True)
    ref = lookup.reference(git.repo, f"refs/heads/{branch}")
    if ref is None:
        raise NotFound(f"no branch {branch}")
    git.repo.add_worktree(branch, str(path), ref)
    (path / WORKDIR).mkdir(exist_ok=True)  # git keeps no empty folders
    return path


def resume_child_turn(git: GitSession, handle: SessionHandle, run_id: str) -> TurnContext:
    """On the child's worktree: its INTERRUPTED run going on in place, as `continue_run`
    resumes one (its messages kept, its record RUNNING again)."""
    view = locate_run(git, run_id)
    ctx = resume_in_place(git, handle, view, len(view.messages))
    write_pending_to_disk(git, ctx)
    return ctx


def close_worktree(git: GitSession, branch: str) -> str:
    """A sub-agent's worktree removed, its branch kept: returns the branch's tip."""
    git.remove_worktree(branch)
    return str(git.branch_tip(branch))


async def run_child(braid: Services, parent: SessionHandle, child: SpawnChild,
                    fields: RunFields, started: Callable[[str], Awaitable[None]],
                    launch: Launch) -> SpawnChild:
    """Run one child the model spawned to its end, on its branch (made already) in its own
    worktree: a fresh turn holding only its prompt, or its INTERRUPTED run resumed (a
    `run_id` in `child`), driven by `launch`. Its result goes back to the caller (the
    parent's tool call), not into the parent's history. `started(run_id)` is awaited once
    the child's run exists."""
    sid, branch = parent.session_id, child["branch"]
    root = braid.store.get(sid)
    info = fields.get("sub_agent") or {}
    handle: SessionHandle | None = None
    in_use = braid.runs.worktrees(sid)
    in_use.add(branch)  # before the worktree is made: no spawn prunes it from now on
    async with claim_turn(braid.locks, braid.runs, sid, branch) as active:
        try:
            path = await root.call(lambda git: add_child_worktree(git, branch))
            handle = SessionHandle(sid, path)
            resume = child.get("run_id")
            made = handle
            ctx = await handle.call(
                (lambda git: resume_child_turn(git, made, resume)) if resume
                else (lambda git: open_turn(git, made, child["prompt"], fields, fresh=True)))
            braid.bus.publish(sid, events.sub_agent_started(
                ctx.run_id, branch, child["label"], child["prompt"],
                str(info.get("parent_turn_id")), str(info.get("parent_branch")),
                spawn={"parent_run_id": fields.get("parent_run_id"),
                       "call_id": info.get("call_id"), "depth": info.get("depth"),
                       "resumed": bool(resume)}))
            await launch(braid, handle, ctx, active)
        except BaseException:
            if handle is not None:
                handle.close()
            try:
                await root.call(lambda git: git.remove_worktree(branch))
            finally:
                braid.runs.worktree_done(sid, branch)
            raise
    # Journaled while the child's first model call goes out (a kill before this: the resumed
    # spawn finds the run by its branch, `_found_runs`).
    await started(ctx.run_id)
    await active.done.wait()
    await braid.mcp.stop_workdir(handle.path / WORKDIR)  # its MCP servers end with it
    await handle.call(lambda git: None)  # after the turn's last index flush
    handle.close()
    out: SpawnChild = {**child, "run_id": ctx.run_id, "status": str(ctx.run["status"]),
                       "final_text": answer_of(ctx.messages)[:RESULT_CHARS],
                       "error": ctx.run.get("error"), "usage": {**ctx.run.get("usage", {})}}
    try:
        try:  # the worktree goes at once; the branch stays (DESIGN §4 "Sub-agents")
            out["commit_id"] = await root.call(lambda git: close_worktree(git, branch))
        finally:
            braid.runs.worktree_done(sid, branch)
        out["files"] = await root.call(lambda git: files_of(git, ctx.run_id, branch))
    except RuntimeError:  # the session's thread is gone: the server is stopping
        log.warning("sub-agent %s ended while the server stopped", branch)
        return out
    braid.bus.publish(sid, events.sub_agent_done(
        {"branch": branch, "label": child["label"], "run_id": ctx.run_id,
         "status": out["status"], "final_text": out["final_text"], "error": out["error"],
         "commit_id": out.get("commit_id"), "parent_branch": str(info.get("parent_branch")),
         "parent_turn_id": str(info.get("parent_turn_id")), "files": out.get("files") or []},
        spawn={"parent_run_id": fields.get("parent_run_id"), "call_id": info.get("call_id"),
               "depth": info.get("depth"), "resumed": bool(resume)},
        usage=out["usage"]))
    braid.bus.publish(sid, events.dag_changed(branch=branch))
    return out


# -- merge_branches -----------------------------------------------------------------------


async def stopped_children(braid: Services, session_id: str, branches: list[str]) -> list[str]:
    """The sub-agent branches among `branches` whose last run the user stopped (CANCELLED):
    the user said no to that work, so the model's merge leaves it out."""
    last: dict[str, str] = {}
    for row in await braid.index.list_runs(session_id):  # oldest first: the last one wins
        last[str(row.get("branch") or "")] = str(row["status"])
    return [b for b in dict.fromkeys(branches)
            if is_sub(b) and last.get(b) == "CANCELLED"]


async def merge(braid: Services, ctx: TurnContext, args: dict[str, Any]) -> str:
    branches = args.get("branches")
    if not isinstance(branches, list) or not branches or \
            not all(isinstance(b, str) and b for b in branches):
        raise ToolRefused("branches must be a non-empty list of branch names")
    strategy = args.get("strategy") or "fail"
    if strategy not in STRATEGIES:
        raise ToolRefused(f"strategy must be one of {', '.join(STRATEGIES)}")
    into = str(ctx.run.get("branch") or "")
    if into in branches:
        raise ToolRefused(f"cannot merge {into}, the branch you work on, into itself")
    sid = ctx.handle.session_id
    busy = [b for b in branches if b in await braid.locks.held(sid)]
    if busy:
        raise ToolRefused(f"a run is still going on on branch {busy[0]}")
    stopped = await stopped_children(braid, sid, branches)
    wanted = [b for b in dict.fromkeys(branches) if b not in stopped]
    if not wanted:
        raise ToolRefused(f"nothing to merge: {', '.join(stopped)} "
                          f"{'was' if len(stopped) == 1 else 'were'} stopped by the user")
    await _checkpoint(braid, ctx, "Before merge")
    index, run_id = len(ctx.messages), ctx.run_id
    done = await ctx.handle.call(
        lambda git: merge_in_turn(git, run_id, wanted, strategy, index))
    if done["commit_id"] is None:
        paths = sorted({c["path"] for c in done["conflicts"]})
        return json.dumps({"conflicts": done["conflicts"], "note": (
            f"nothing was changed: the merge conflicts in {', '.join(paths)}. Retry with "
            "strategy 'ours', 'theirs' or 'agent', or edit the files and retry.")})
    braid.bus.publish(sid, events.checkpoint(ctx.run_id, done["commit_id"], "merge"))
    braid.bus.publish(sid, events.merged(
        ctx.run_id, done["commit_id"], done["parent_ids"], done["branches"], strategy,
        paths=sorted({c["path"] for c in done["conflicts"]})))
    braid.bus.publish(sid, events.dag_changed(run_id=ctx.run_id))
    out: dict[str, Any] = {"commit_id": done["commit_id"], "parent_ids": done["parent_ids"]}
    if stopped:
        out["skipped"] = stopped
        out["skipped_note"] = ("not merged: the user stopped the sub-agents on these "
                               "branches (their runs ended CANCELLED)")
    if done["conflicts"]:
        paths = sorted({c["path"] for c in done["conflicts"]})
        out["resolved"] = {"strategy": strategy, "paths": paths}
        if strategy == "agent":
            out["note"] = ("these files now hold conflict markers (<<<<<<< ======= >>>>>>>): "
                           "fix each with your file tools")
    return json.dumps(out)


def merge_in_turn(git: GitSession, run_id: str, branches: list[str], strategy: str,
                  message_index: int) -> ToolMerge:
    """On the session thread of a live turn that holds the branch (its own changes committed
    just before): merge `branches` into it as one of the turn's checkpoints, kind `merge`,
    whose parents are HEAD and every branch tip; reverting the turn reverts it. With `fail`
    and conflicts: the conflicts, nothing written. Branches all merged already (a resumed
    call whose merge was made before a kill): that merge again."""
    tips = [git.branch_tip(name) for name in branches]  # NotFound before anything is written
    head = git.head_commit()
    if all(tip == head.id or git.repo.descendant_of(head.id, tip) for tip in tips):
        made = next((c for c in first_parent_line(head)
                     if len(c.parent_ids) > 1 and set(tips) <= set(c.parent_ids)), None)
        if made is not None:
            return {"commit_id": str(made.id), "parent_ids": [str(p) for p in made.parent_ids],
                    "branches": branches, "strategy": strategy, "conflicts": []}
    plan = plan_merge(git, branches, strategy)
    shown: list[ToolConflict] = [{"path": c["path"], "ours": c["ours"], "theirs": c["theirs"],
                                  "branch": c["branch"]} for c in plan.conflicts]
    if plan.conflicts and strategy == "fail":
        return {"commit_id": None, "parent_ids": [], "branches": branches,
                "strategy": strategy, "conflicts": shown}
    old_workdir = workdir_oid(head, empty_tree(git.repo).id)
    written, deleted = atomic.merge_paths(git, old_workdir, plan.workdir_oid)
    with journal.intent(git, "merge", [*written, *deleted]):
        changes = atomic.write_workdir(git, plan.workdir_oid, written, deleted)
        crash.at("merge-tool.after_files")
        oid = git.write_checkpoint(
            changes, summary=f"Merge {', '.join(branches)} into {plan.into}"[:200],
            kind="merge", run_id=run_id, message_index=message_index,
            extra_parents=plan.tips)
    crash.at("merge-tool.after_commit")
    return {"commit_id": str(oid), "parent_ids": [str(p) for p in git.commit(oid).parent_ids],
            "branches": branches, "strategy": strategy, "conflicts": shown}
