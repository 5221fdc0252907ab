"""What a model call is sent (DESIGN §4 "Project instructions", "Context budget",
"Compaction"): the base prompt, the instructions in effect (the operator's, the branch's
AGENTS.md), the branch's newest summary in place of the runs it covers, then the branch's
messages after it: all whole when they fit, else the oldest tool results masked, else the
oldest left out with a note (store/context.py). And what a compaction would summarize: when
a turn needs one (`needs_compaction`), which part (`plan`), in how many calls (`parts_of`).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.agent.compaction import instructions
from server.agent.compaction.instructions import Instructions
from server.base.records import (
    ContextUse,
    Covers,
    MessageRecord,
    ModelMessage,
    new_message,
)
from server.git.session import GitSession
from server.model.messages import to_model_window
from server.store import context, layout

if TYPE_CHECKING:
    from server.agent.services import Services

SYSTEM_PROMPT = (
    "You are Braid's agent. You work on the files of this session's workdir with your tools "
    "(read_file, list_files, write_file, edit_file, apply_patch, delete_file, and shell when "
    "enabled); paths are relative to the workdir. Every turn is checkpointed in git, so the "
    "user can revert what you did. Answer concisely in Markdown."
)


def tool_tokens(tools: list[Any]) -> int:
    """The estimated tokens of the tool definitions a call offers: each definition's cost
    (what the session's Tools list shows), added up."""
    return sum(definition_cost(tool) for tool in tools)


def definition_cost(tool: Any) -> int:
    """What one tool's definition takes of the context budget."""
    return context.text_cost(json.dumps(tool))


@dataclass
class Request:
    """A call's messages and what they hold (the run record's `context`)."""

    messages: list[ModelMessage]
    use: ContextUse


def build(prior: Sequence[MessageRecord], sums: context.Sums, current: list[MessageRecord],
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


def check_for(braid: Services, text: str, tools: int) -> Callable[[GitSession], int] | None:
    """`open_turn`'s `compact_if` for a turn that opens with the user's `text` (a message
    sent or queued), whose calls offer tool definitions of `tools` tokens (every tool
    offered, MCP's too: `turns.offered_cost`); None when compaction is off."""
    settings = braid.settings
    if not settings.compaction:
        return None

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


def plan(prior: Sequence[MessageRecord], sums: context.Sums, keep: int | None) -> Plan | None:
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
