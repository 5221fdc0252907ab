"""The demo model's script (DESIGN §6): what the last user message asks for, read line by
line (write, append, delete, read, shell, call, batch, say, fail, slow, recall, notes), and the
reply that follows from the conversation so far: the next tool batch, or the answer. A pure
function of the request; `model/demo.py` serves it as an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

KEYWORDS = {"write", "append", "delete", "read", "shell", "batch", "say", "fail", "slow",
             "recall", "notes", "spawn", "merge", "call"}
VERBS = {"write_file": "wrote", "edit_file": "appended", "delete_file": "deleted",
          "read_file": "read", "shell": "ran", "spawn_sub_agents": "spawned",
          "merge_branches": "merged"}
SPAWN, MERGE = "spawn_sub_agents", "merge_branches"
# `merge STRATEGY` only with one of these words: "merge them" stays a plain message.
MERGE_STRATEGIES = ("fail", "ours", "theirs", "agent")
_BRANCH_LINE = re.compile(r"^- [^:]+: ?(.*)$")


@dataclass
class Plan:
    """What the last user message asks for."""

    batches: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    says: list[str] = field(default_factory=list)
    fail: str | None = None
    slow_ms: int = 0
    recall: bool = False
    notes: bool = False


class DemoError(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def text_of(content: Any) -> str:
    """Message content as plain text; null and list-of-parts contents are legal in the API."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else p.get("text") or "" for p in content
            if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))
        )
    return str(content)


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n")


def _tool_call(word: str, rest: str, has_shell: bool) -> tuple[str, dict[str, Any]] | None:
    """The tool call a line asks for, if any."""
    path, _, body = rest.partition(" ")
    if word == "write" and path:
        return "write_file", {"path": path, "content": _unescape(body) + "\n"}
    if word == "append" and path:
        return "edit_file", {"path": path, "old_text": "", "new_text": _unescape(body) + "\n"}
    if word in ("delete", "read") and path:
        return f"{word}_file", {"path": path}
    if word == "shell" and has_shell and rest.strip():
        return "shell", {"command": rest}
    if word == "call" and path:  # `call TOOL JSON`: any tool, the object as its arguments
        try:
            args = json.loads(body) if body.strip() else {}
        except ValueError:
            return None
        return (path, args) if isinstance(args, dict) else None
    return None


def _plan_line(plan: Plan, word: str, rest: str) -> None:
    """A line that shapes the answer rather than calling a tool."""
    if word == "say":
        plan.says.append(_unescape(rest))
    elif word == "fail" and plan.fail is None:
        plan.fail = rest or "demo model failure"
    elif word == "slow" and rest.strip().isdigit():
        plan.slow_ms = int(rest.strip())
    elif word == "recall":
        plan.recall = True
    elif word == "notes":
        plan.notes = True


def _orchestration_line(plan: Plan, current: list[tuple[str, dict[str, Any]]], word: str,
                        rest: str) -> list[tuple[str, dict[str, Any]]]:
    """`spawn LABEL: PROMPT` lines make one `spawn_sub_agents` call (a batch of its own);
    `merge STRATEGY` a `merge_branches` call after it (its branches: the spawn's result's,
    filled in by `respond`). Returns the batch being gathered."""
    if word == "spawn":
        label, _, prompt = rest.partition(":")
        agent = {"label": label.strip(), "prompt": _unescape(prompt.strip())}
        spawn = next((b for b in plan.batches if b and b[0][0] == SPAWN), None)
        if spawn is not None:
            spawn[0][1]["agents"].append(agent)
            return current
        if current:
            plan.batches.append(current)
        plan.batches.append([(SPAWN, {"agents": [agent]})])
        return []
    if current:
        plan.batches.append(current)
    plan.batches.append([(MERGE, {"branches": [], "strategy": rest.strip() or "fail"})])
    return []


def parse(user_text: str, has_shell: bool) -> Plan:
    plan = Plan()
    current: list[tuple[str, dict[str, Any]]] = []
    for raw in user_text.split("\n"):
        word, _, rest = raw.rstrip("\r").partition(" ")
        if word not in KEYWORDS:
            continue
        if word == "spawn" or (word == "merge" and rest.strip() in MERGE_STRATEGIES):
            current = _orchestration_line(plan, current, word, rest)
            continue
        call = _tool_call(word, rest, has_shell)
        if call is not None:
            current.append(call)
        elif word == "batch":
            # Empty batches are dropped: a response with no tool calls would end the turn.
            if current:
                plan.batches.append(current)
            current = []
        else:
            _plan_line(plan, word, rest)
    if current:
        plan.batches.append(current)
    return plan


@dataclass
class MergeNote:
    finals: list[str]
    conflicts: list[str]


def merge_note(messages: list[dict[str, Any]]) -> MergeNote | None:
    """The merge note of the current turn: a system message other than the first (the base
    prompt) whose first line starts with `Merge turn`, with `- BRANCH: TEXT` lines and maybe a
    `Conflicts:` list of `- PATH` lines. Only notes after the previous user message count, so
    a merge earlier in the chat does not turn every later answer into `merged: ...`; among
    those the last one wins. Read from the end: a long request costs what the turn holds."""
    first_system = next((i for i, m in enumerate(messages) if m.get("role") == "system"), -1)
    users = 0
    for i in range(len(messages) - 1, -1, -1):
        role = messages[i].get("role")
        if role == "user":
            users += 1
            if users == 2:  # the previous user message: notes before it are older turns'
                return None
        elif role == "system" and i != first_system:
            note = _read_note(text_of(messages[i].get("content")))
            if note is not None:
                return note
    return None


def _read_note(text: str) -> MergeNote | None:
    lines = text.split("\n")
    if not lines[0].startswith("Merge turn"):
        return None
    note = MergeNote([], [])
    in_conflicts = False
    for line in lines[1:]:
        if line.strip() == "Conflicts:":
            in_conflicts = True
        elif in_conflicts:
            if line.startswith("- ") and line[2:].strip():
                note.conflicts.append(line[2:].strip())
            else:
                in_conflicts = False
        elif match := _BRANCH_LINE.match(line):
            note.finals.append(match.group(1))
    return note if note.finals else None


def keep_both_sides(text: str) -> str:
    """A file with conflict markers resolved by keeping both sides (ours, then theirs)."""
    out, in_base = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("|||||||"):
            in_base = True  # diff3 style: the ancestor's lines are dropped
        elif line.startswith("======="):
            in_base = False
        elif line.startswith(("<<<<<<<", ">>>>>>>")):
            in_base = False
        elif not in_base:
            out.append(line)
    return "".join(out)


def conflict_batches(
    note: MergeNote, messages: list[dict[str, Any]], after: int
) -> list[list[tuple[str, dict[str, str]]]]:
    """A merge turn with conflicts: read every conflicted file in one batch, then write each
    one back with its markers resolved, from what the reads returned."""
    batches: list[list[tuple[str, dict[str, str]]]] = [
        [("read_file", {"path": p}) for p in note.conflicts]]
    reads = next((m for m in messages[after:]
                  if m.get("role") == "assistant" and m.get("tool_calls")), None)
    if reads is None:
        return batches + [[]]  # the writes are known once the reads have answered
    paths = {}
    for call in reads.get("tool_calls") or ():
        try:
            paths[call.get("id")] = json.loads(call["function"]["arguments"]).get("path")
        except (KeyError, TypeError, ValueError):
            continue
    writes = []
    for m in messages[after:]:
        path = paths.get(m.get("tool_call_id")) if m.get("role") == "tool" else None
        content = text_of(m.get("content"))
        if path and not content.startswith("error:"):
            writes.append(("write_file", {"path": path, "content": keep_both_sides(content)}))
    return batches + [writes]


@dataclass
class Reply:
    content: str | None
    tool_calls: list[dict[str, Any]]
    slow_ms: int


def _calls_batch(m: dict[str, Any]) -> bool:
    return m.get("role") == "assistant" and bool(m.get("tool_calls"))


def batch_count(messages: list[dict[str, Any]]) -> int:
    """How many of `messages` are tool batches (`_calls_batch`). It runs over the whole
    request, thousands of messages in a long chat: a plain loop, no call per message, is
    about twice as quick as `sum` over a generator calling `_calls_batch`."""
    n = 0
    for m in messages:
        if m.get("tool_calls") and m.get("role") == "assistant":
            n += 1
    return n


SUMMARIZE = "Summarize the conversation so far"
EARLIER = "Summary of the earlier conversation: "


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def summary_answer(messages: list[dict[str, Any]]) -> str:
    """The answer to a summary request (DESIGN §6): `summary: ` + the first lines of what it
    was sent to summarize, an earlier summary first (without its own `summary: `), then each
    user message, joined by ` | `."""
    parts = []
    for m in messages:
        text = text_of(m.get("content"))
        if m.get("role") == "system" and text.startswith(EARLIER):
            parts.append(_first_line(text[len(EARLIER):].removeprefix("summary: ")))
        elif m.get("role") == "user":
            parts.append(_first_line(text))
    return "summary: " + " | ".join(p for p in parts if p)


def respond(request: dict[str, Any]) -> Reply:
    """The reply to a request. The conversation is read from its end (the last user message,
    the turn after it); only `recall`, `notes` and a tool call's numbering read further."""
    messages = request.get("messages") or []
    if not all(map(isinstance, messages, repeat(dict))):
        messages = [m for m in messages if isinstance(m, dict)]
    tools = request.get("tools") or []
    has_shell = any(
        isinstance(t, dict) and (t.get("function") or {}).get("name") == "shell" for t in tools
    )
    last_user = next((i for i in range(len(messages) - 1, -1, -1)
                      if messages[i].get("role") == "user"), -1)
    user_text = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
    if user_text.startswith(SUMMARIZE):
        return Reply(summary_answer(messages[:last_user]), [], 0)
    plan = parse(user_text, has_shell)
    if plan.fail is not None:
        raise DemoError(500, plan.fail, "server_error")
    done = sum(1 for m in messages[last_user + 1 :] if _calls_batch(m))
    note = merge_note(messages)
    if note is not None and note.conflicts:
        plan.batches = [b for b in conflict_batches(note, messages, last_user + 1) if b] \
            + plan.batches
    spawned = _tool_results(messages, last_user + 1) if any(
        b and b[0][0] in (SPAWN, MERGE) for b in plan.batches) else None
    if done < len(plan.batches):
        for name, args in plan.batches[done]:
            if name == MERGE and spawned is not None:  # the branches the spawn returned
                args["branches"] = [a.get("branch") for a in spawned.spawn.get("agents") or ()]
        # Numbered over the whole conversation so ids stay unique across turns too.
        n = batch_count(messages) + 1
        calls = [
            {"id": f"call_{n}_{k}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for k, (name, args) in enumerate(plan.batches[done])
        ]
        return Reply(None, calls, plan.slow_ms)
    if spawned is not None and not plan.says:
        return Reply(_spawn_answer(plan, spawned), [], plan.slow_ms)
    return Reply(_answer(plan, note, messages, user_text), [], plan.slow_ms)


@dataclass
class Spawned:
    """What the `spawn_sub_agents` and `merge_branches` calls of this turn returned."""

    spawn: dict[str, Any] = field(default_factory=dict)
    merge: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)


def _tool_results(messages: list[dict[str, Any]], start: int) -> Spawned:
    """This turn's results (from `start`); without a spawn in it, the last spawn's result
    before (a `merge` retried in a later turn merges that spawn's branches)."""
    out = Spawned()
    for m in messages[start:]:
        if m.get("role") != "tool":
            continue
        text = text_of(m.get("content"))
        if text.startswith("error:"):
            out.errors.append(text)
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and "agents" in value:
            out.spawn = value
        elif isinstance(value, dict) and ("commit_id" in value or "conflicts" in value):
            out.merge = value
    if not out.spawn:
        for m in reversed(messages[:start]):
            text = text_of(m.get("content")) if m.get("role") == "tool" else ""
            if text.startswith('{"agents"'):
                out.spawn = json.loads(text)
                break
    return out


def _spawn_answer(plan: Plan, spawned: Spawned) -> str:
    """A spawn turn's answer: `merged: ` + the children's answers after a merge, the
    conflicted paths after a refused one, else `done: spawned LABELS`; an error as it came."""
    if spawned.errors:
        return spawned.errors[-1]
    agents = spawned.spawn.get("agents") or []
    merge = spawned.merge
    if merge is not None and merge.get("conflicts") and not merge.get("commit_id"):
        paths = sorted({str(c.get("path")) for c in merge["conflicts"]})
        return "conflicts: " + ", ".join(paths)
    if merge is not None:
        # A child that ended without an answer (stopped, failed) adds no empty "; ".
        return "merged: " + "; ".join(t for a in agents if (t := str(a.get("final_text") or "")))
    return "done: spawned " + ", ".join(str(a.get("label")) for a in agents)


def _answer(plan: Plan, note: MergeNote | None, messages: list[dict[str, Any]],
            user_text: str) -> str:
    ran = [(name, args) for batch in plan.batches for name, args in batch]
    if plan.says:
        return "\n".join(plan.says)
    if note is not None:
        return "merged: " + "; ".join(note.finals)
    if ran:
        return "done: " + ", ".join(
            f"{VERBS[name]} {args.get('path', args.get('command', ''))}" if name in VERBS
            else f"called {name}" for name, args in ran
        )
    if plan.recall:
        return " | ".join(text_of(m.get("content")) for m in messages if m.get("role") == "user")
    if plan.notes:
        systems = [text_of(m.get("content")) for m in messages if m.get("role") == "system"]
        return " | ".join(systems[1:]) or "no notes"
    return "echo: " + user_text


def usage(prompt_tokens: int, reply: Reply) -> dict[str, int]:
    """Token counts as a server reports them; the prompt's is estimated from the request's
    size (~4 bytes a token), as counting it again would cost as much as reading it."""
    completion = len((reply.content or "").split()) + sum(
        len(c["function"]["arguments"].split()) for c in reply.tool_calls
    )
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}
