"""What the model is sent, and compaction as a run (DESIGN §4 "Project instructions",
"Context budget", "Compaction").

A call is sent the base prompt, the instructions in effect (the operator's, the branch's
AGENTS.md), the newest summary of the branch (if any) in place of the runs it covers, then
the branch's messages after it: all whole when they fit, else the oldest tool results masked,
else the oldest left out with a note (store/context.py).

When a turn opens on a branch whose messages no longer fit even masked, it first compacts:
the model is asked to summarize the oldest part, and the answer is a `compaction` run of its
own on the branch (one commit, `Braid-Kind: compaction`, holding its summary message and its
record), at the seq the turn kept free before its own message. A kill before that commit
leaves the branch as before; a failed call leaves the turn with the old cut (oldest left out
with a note) and a warning on its record, never a failed run. `compact` does it on demand.
"""

from __future__ import annotations

import contextlib
import json
import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.agent import orchestrate
from server.agent.live_runs import claim_turn
from server.agent.tools import Workspace
from server.base import crash
from server.base.errors import Conflict
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    ContextUse,
    Covers,
    MessageRecord,
    ModelMessage,
    RunRecord,
    Usage,
    new_message,
    new_run,
    to_json_bytes,
)
from server.base.results import InstructionsShown, RunStarted
from server.git.session import GitSession
from server.model.messages import to_model_window
from server.store import context, instructions, layout
from server.store.instructions import Instructions

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.agent.turn_context import TurnContext
    from server.store.session_store import SessionHandle

SYSTEM_PROMPT = (
    "You are Braid's agent. You work on the files of this session's workdir with your tools "
    "(read_file, list_files, write_file, edit_file, apply_patch, delete_file, and shell when "
    "enabled); paths are relative to the workdir. Every turn is checkpointed in git, so the "
    "user can revert what you did. Answer concisely in Markdown."
)
log = logging.getLogger("braid")
_TOOL_TOKENS: dict[tuple[str, ...], int] = {}


def tool_tokens(tools: list[Any]) -> int:
    """The estimated tokens of the tool definitions a call offers (made once per set)."""
    key = tuple(str((t.get("function") or {}).get("name")) for t in tools)
    if key not in _TOOL_TOKENS:
        _TOOL_TOKENS[key] = context.text_cost(json.dumps(tools)) if tools else 0
    return _TOOL_TOKENS[key]


@dataclass
class Request:
    """A call's messages and what they hold (the run record's `context`)."""

    messages: list[ModelMessage]
    use: ContextUse


def build(prior: list[MessageRecord], sums: context.Sums, current: list[MessageRecord],
          heads: list[str], budget: int, tools: int, send_reasoning: bool = False,
          ask: str | None = None, shaped: bool = True) -> Request:
    """The request for a branch's messages `prior` (with their running totals) and the
    turn's own `current`: `heads` (the base prompt, then instructions) first, the branch's
    newest summary, then what fits `budget` tokens with `tools` tokens of definitions.
    `ask`: a last user message (the summary request's). `shaped=False`: only the figures
    (the request's messages are not made)."""
    summary, spans = context.branch_spans(prior, sums)
    spans.append(context.Span(current, 0, len(current), context.sums_of(current)))
    win = context.Window(spans)
    system = context.text_cost(heads[0])
    instr = sum(context.text_cost(h) for h in heads[1:])
    heads = list(heads)
    summed = 0
    if summary is not None:
        heads.append(context.summary_text(summary, budget))
        summed = context.text_cost(heads[-1])
    asked = context.text_cost(ask) if ask else 0
    fixed = system + instr + tools + summed + asked
    fitted = context.fit_window(win, budget - fixed)
    note = 0
    if fitted.omitted:  # room for the note too
        fitted = context.fit_window(win, budget - fixed - context.text_cost(
            context.note_text(win.n)))
        heads.append(context.note_text(fitted.omitted))
        note = context.text_cost(heads[-1])
    out = to_model_window(heads, fitted.masked, fitted.whole, send_reasoning) if shaped else []
    if ask and shaped:
        out.append({"role": "user", "content": ask})
    use: ContextUse = {
        "tokens": fixed + note + fitted.tokens, "budget": budget,
        "sent_messages": len(fitted.masked) + len(fitted.whole),
        "omitted_messages": fitted.omitted, "masked_messages": fitted.masked_count,
        "parts": {"system": system, "instructions": instr, "tools": tools,
                  "summary": summed, "messages": fitted.tokens + note + asked}}
    if summary is not None:
        use["summary_run_id"] = str(summary.get("run_id"))
        use["summarized_messages"] = context.covered_until(summary)
    return Request(out, use)


def heads_of(system_prompt: str, found: Instructions | None, server_file: Any) -> list[str]:
    """The base prompt, then the instructions in effect (the operator's, the branch's)."""
    return [system_prompt, *instructions.messages_of(found or instructions.NONE,
                                                      instructions.server_text(server_file))]


def needs_compaction(git: GitSession, heads: list[str], text: str, budget: int,
                     tools: int) -> int:
    """On the session thread, as a turn opens: would its first call (the branch's messages
    and the user's `text`) leave messages out even with old tool output masked? Then the
    tokens of newest messages a compaction keeps whole (half the room the instructions,
    the tools and a summary leave), else 0."""
    prior, sums = layout.messages(git), layout.window_sums(git)
    if prior and context.is_compaction(prior[-1]):  # again at once would gain nothing
        return 0
    user = new_message("user", None, text)
    req = build(prior, sums, [user], heads, budget, tools, shaped=False)
    if not req.use["omitted_messages"]:
        return 0
    parts = req.use["parts"]
    room = budget - parts["system"] - parts["instructions"] - tools \
        - budget // context.SUMMARY_SHARE - context.cost(user)
    keep = max(1, room // context.WHOLE_SHARE)
    return keep if plan(prior, sums, keep) is not None else 0


def turn_tools(braid: Services) -> list[Any]:
    """The tool definitions a turn's calls offer."""
    tools = Workspace.schemas(braid.settings.shell)
    if braid.settings.subagent_tools:
        tools += orchestrate.schemas()
    return tools


def check_for(braid: Services, text: str) -> Callable[[GitSession], int] | None:
    """`open_turn`'s `compact_if` for a turn that opens with the user's `text` (a message
    sent or queued); None when compaction is off."""
    settings = braid.settings
    if not settings.compaction:
        return None
    tools = tool_tokens(turn_tools(braid))

    def needs(git: GitSession) -> int:
        heads = heads_of(SYSTEM_PROMPT, instructions.project(git), settings.instructions_file)
        return needs_compaction(git, heads, text, settings.context_tokens, tools)

    return needs


@dataclass
class Plan:
    """What a compaction summarizes: `covered` (the branch's messages from the earlier
    summary's end to `covers.until`, less that summary), and the earlier summary."""

    previous: MessageRecord | None
    covered: list[MessageRecord]
    covers: Covers


def plan(prior: list[MessageRecord], sums: context.Sums, keep: int | None) -> Plan | None:
    """The oldest part of a branch to summarize: up to where the newest messages that cost
    at most `keep` tokens begin (at a run's start), or on demand (`keep` None) all but the
    newest run; always past the earlier summary, which the new one takes in. None: nothing
    to summarize."""
    at = context.newest_compaction(prior)
    previous = prior[at] if at >= 0 else None
    start = min(context.covered_until(previous), at) if previous is not None else 0
    lo, n = at + 1, len(prior)
    if keep is None:
        until = n
        while until > lo and prior[until - 1].get("run_id") == prior[n - 1].get("run_id"):
            until -= 1
        until = n if until <= lo else until
    else:
        full = sums.full
        until = context.run_start_after(prior, max(lo, bisect_cut(full, n, keep, lo)))
    covered = [m for m in prior[start:until] if not context.is_compaction(m)]
    if not covered:
        return None
    runs = list(dict.fromkeys(str(m.get("run_id")) for m in covered if m.get("run_id")))
    before = previous.get("covers") if previous is not None else None
    covers: Covers = {
        "from_run": before["from_run"] if before else (runs[0] if runs else None),
        "to_run": runs[-1] if runs else None,
        "turns": (before["turns"] if before else 0) + len(runs),
        "until": until}
    return Plan(previous, covered, covers)


def bisect_cut(full: Any, n: int, keep: int, lo: int) -> int:
    """The smallest i in [lo, n] whose messages i..n cost at most `keep` (running totals)."""
    return bisect_left(full, full[n] - keep, lo, n)


def summary_request(earlier: str | None, part: list[MessageRecord], heads: list[str],
                    budget: int) -> Request:
    """A call that asks for the summary: the earlier summary (`earlier`), a part of the
    covered messages (what fits, old tool output masked), then the ask."""
    prior: list[MessageRecord] = []
    if earlier is not None:
        prior.append(new_message("system", None, earlier, kind=context.COMPACTION))
    prior += part
    return build(prior, context.sums_of(prior), [], heads, budget, 0,
                 ask=context.SUMMARIZE_ASK)


def parts_of(covered: list[MessageRecord], heads: list[str], budget: int
             ) -> list[tuple[int, int]]:
    """The covered messages cut, at runs' starts, into parts that each fit one summary
    call (old tool output masked) beside the summary of the parts before: a branch much
    longer than the budget is summarized part by part, the oldest first, none left out."""
    sums = context.sums_of(covered)
    room = budget - sum(context.text_cost(h) for h in heads) - budget // context.SUMMARY_SHARE \
        - context.text_cost(context.SUMMARIZE_ASK) - context.text_cost(context.note_text(
            len(covered)))
    # A call sends its newest messages whole within half the room (context.fit_window) and
    # the rest masked: a part whose masked total is half the room always fits whole.
    room = max(1, room // context.WHOLE_SHARE)
    out: list[tuple[int, int]] = []
    start, n = 0, len(covered)
    while start < n:
        end = max(start + 1, bisect_right(sums.masked, sums.masked[start] + room, start, n + 1)
                  - 1)
        if end < n:  # back to the start of the run it cuts, unless that is the part's start
            back = end
            while back > start and covered[back].get("run_id") == covered[back - 1].get(
                    "run_id"):
                back -= 1
            end = back if back > start else context.run_start_after(covered, end)
        out.append((start, end))
        start = end
    return out


def add_usage(total: Usage, usage: Usage | None) -> None:
    """The tokens of each summary call, summed on the compaction's record."""
    if usage and "prompt_tokens" in usage:
        total["prompt_tokens"] = total.get("prompt_tokens", 0) + int(usage["prompt_tokens"])
    if usage and "completion_tokens" in usage:
        total["completion_tokens"] = (total.get("completion_tokens", 0)
                                      + int(usage["completion_tokens"]))


async def summarize(braid: Services, handle: SessionHandle, request: Request,
                    model: str | None, endpoint: str | None) -> tuple[str, Usage | None]:
    """The model's summary (its text, its usage). Raises what the call raised."""
    crash.at("compaction.model")
    stream = braid.model.stream(request.messages, [], model=model, endpoint=endpoint)
    reply = None
    async with contextlib.aclosing(stream):
        async for kind, value in stream:
            if kind == "reply":
                reply = value
    if reply is None or not (reply.content or "").strip():
        raise RuntimeError("the model answered the summary request with nothing")
    return str(reply.content).strip(), reply.usage


def write_compaction(git: GitSession, record: RunRecord, msg: MessageRecord,
                     seq: int | None) -> str:
    """On the session thread: the compaction run's one commit (its summary message at
    `seq`, kept free by a turn, or the next, on demand; and its record)."""
    at = layout.next_seq(git) if seq is None else seq
    msg_path = layout.message_path(git, at, "system", msg["id"])
    run_path = layout.new_run_path(git, str(record["run_id"]))
    covers = msg.get("covers")
    turns = covers["turns"] if covers else 0
    word = "turn" if turns == 1 else "turns"
    oid = git.write_checkpoint(
        {msg_path: to_json_bytes(msg), run_path: to_json_bytes(record)},
        summary=f"Compaction: {turns} earlier {word} summarized", kind=context.COMPACTION,
        # In a turn the index waits for the turn's end (its recovery after a kill); on
        # demand nothing else would bring it up to date.
        run_id=str(record["run_id"]), message_index=1, sync_index=seq is None)
    return str(oid)


async def run_compaction(braid: Services, handle: SessionHandle, branch: str,
                         found: Plan, heads: list[str], model: tuple[str | None, str | None],
                         seq: int | None) -> tuple[RunRecord, MessageRecord]:
    """Summarize `found` and commit the compaction run; its events go to every tab."""
    run_id = new_message_id()
    record: RunRecord = {**new_run(run_id, handle.session_id, branch), "kind": context.COMPACTION,
                         "covers": found.covers}
    record["model"], record["endpoint"] = model[0], model[1] or ""
    budget = braid.settings.context_tokens
    sid = handle.session_id
    braid.bus.publish(sid, "run_started", {"run_id": run_id, "run": record.copy(),
                                           "branch": branch, "messages": [], "siblings": None})
    earlier = found.previous.get("content") if found.previous is not None else None
    usage: Usage = {}
    try:
        for start, end in parts_of(found.covered, heads, budget):
            request = summary_request(earlier, found.covered[start:end], heads, budget)
            record["context"] = request.use
            earlier, used = await summarize(braid, handle, request, model[0], model[1])
            add_usage(usage, used)
        text = earlier or ""
    except BaseException as e:
        braid.bus.publish(sid, "run_error", {"run_id": run_id, "run": record.copy(),
                                             "status": "ERROR", "messages": [], "files": [],
                                             "siblings": None, "error": str(e) or type(e).__name__})
        raise
    msg = new_message("system", run_id, text, kind=context.COMPACTION, covers=found.covers)
    msg["id"] = run_id  # a run's id is its first message's
    record.update({"status": "COMPLETED", "summary": text, "message_count": 1,
                   "updated_at": now_iso()})
    record["usage"] = usage
    commit_id = await handle.call(lambda git: write_compaction(git, record, msg, seq))
    braid.bus.publish(sid, "checkpoint", {"run_id": run_id, "commit_id": commit_id,
                                          "kind": context.COMPACTION})
    await braid.index.upsert_run(sid, record)
    braid.bus.publish(sid, "run_completed", {"run_id": run_id, "run": record.copy(),
                                             "status": "COMPLETED", "messages": [msg.copy()],
                                             "files": [], "siblings": None})
    braid.bus.publish(sid, "dag_changed", {"run_id": run_id})
    return record, msg


async def compact_in_turn(braid: Services, ctx: TurnContext, heads: list[str]) -> None:
    """A turn's compaction before its first call, at the seq the turn kept free. A failed
    call (or anything else but a stop) leaves the turn to the old cut, with a warning."""
    if ctx.compaction is None or ctx.prior_sums is None:
        return
    seq, keep = ctx.compaction
    ctx.compaction = None
    found = plan(ctx.prior, ctx.prior_sums, keep)
    if found is None:
        return
    handle = ctx.handle
    try:
        await run_compaction(braid, handle, str(ctx.run.get("branch")), found, heads,
                             (ctx.run.get("model"), ctx.run.get("endpoint")), seq)
    except Exception as e:  # noqa: BLE001 - the turn goes on with the old cut
        log.warning("the compaction before run %s failed: %s", ctx.run_id, e)
        ctx.run["warning"] = ("the earlier conversation could not be summarized "
                              f"({getattr(e, 'message', None) or e}); its oldest messages "
                              "were left out instead")
        return

    def reread(git: GitSession) -> tuple[list[MessageRecord], context.Sums]:
        return layout.messages(git), layout.window_sums(git)

    ctx.prior, ctx.prior_sums = await handle.call(reread)


async def compact(braid: Services, user_id: str, session_id: str) -> RunStarted:
    """`compact`: summarize the shown branch's older runs now (all but the newest); returns
    the compaction run's id once it is committed (its events went to every tab)."""
    handle = braid.store.get_owned(user_id, session_id)
    branch = await handle.call(lambda git: git.branch)
    async with claim_turn(braid.locks, braid.runs, handle.session_id, branch) as active:
        def look(git: GitSession) -> tuple[Plan | None, Instructions]:
            if git.branch != branch:
                raise Conflict(f"the session switched from branch {branch} to {git.branch}")
            return plan(layout.messages(git), layout.window_sums(git), None), \
                instructions.project(git)

        found, found_instructions = await handle.call(look)
        if found is None:
            raise Conflict("nothing to compact: the branch has no earlier turns to summarize")
        heads = heads_of(SYSTEM_PROMPT, found_instructions, braid.settings.instructions_file)
        endpoint, model = braid.model.resolve(handle.meta.get("model"),
                                              handle.meta.get("endpoint"))
        record, _ = await run_compaction(braid, handle, branch, found, heads,
                                         (model, endpoint.name), None)
        active.run_id = str(record["run_id"])
        # The claim is let go here (a raise above lets claim_turn free it): the branch is
        # free for the next turn or a queued message.
        await braid.runs.end(active)
    braid.packer.touch(handle.session_id, handle.path)
    return {"run_id": str(record["run_id"])}


async def instructions_in_effect(braid: Services, user_id: str, session_id: str
                                 ) -> InstructionsShown:
    """What the page's instructions chip shows: the shown branch's AGENTS.md (its size, or
    0: none) and whether the operator's file is in effect."""
    handle = braid.store.get_owned(user_id, session_id)
    found = await handle.call(instructions.project)
    return {"path": instructions.FILE_NAME if found.blob_oid else None, "size": found.size,
            "cut": found.cut,
            "server": instructions.server_text(braid.settings.instructions_file) is not None}
