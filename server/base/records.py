"""Typed records: what a message file, a run record and `session.json` hold (DESIGN §3),
and the other records that stay on disk or in the index: the intent and export records, the
index's rows, a file a turn changed, the model's request. What the core's calls return, what
the page shows and the events are in results.py, made of these.

They are `TypedDict`s: JSON on disk and on the wire, and a turn holds thousands of messages,
so at runtime they stay the plain dicts orjson writes (keys sorted on disk: the files are the
same as before) and read back at no cost, while mypy checks every key. Each record is made
here, in one place (`new_message`, `new_run`, `new_session_meta`); the keys a kind of record
adds (a tool result's `tool_call_id`, a sub-agent's `sub_agent`, an upload's `kind`...) are
`NotRequired`.
"""

from __future__ import annotations

import json
from typing import Any, NotRequired, TypedDict, Unpack, cast

import orjson

from server.base.ids import new_message_id, now_iso


def to_json_bytes(obj: Any) -> bytes:
    """A record's text, byte for byte `json.dumps(obj, indent=1, sort_keys=True,
    ensure_ascii=False)` and a newline, by orjson (no reference cycle left, issue 11), its
    indent of two halved. Unlike json: NaN/Infinity are null, 1e-7..1e-4 floats unexponented."""
    try:
        out = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                           | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # keys that are not str, ints past 64 bits, surrogates
        return (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    if b"\n    " not in out:  # one level deep (no raw newline is inside a JSON string)
        return out.replace(b"\n  ", b"\n ")
    return b"\n".join([ln[(len(ln) - len(ln.lstrip(b" "))) >> 1:] for ln in out.split(b"\n")])


# -- the files of a session: history/, runs/, session.json -----------------------------------


class Skipped(TypedDict):
    """A name git cannot hold, left out: how a commit, an event and a result list it."""

    path: str
    reason: str


class ToolFunction(TypedDict, total=False):
    name: str
    arguments: str  # the JSON text the model sent (free-form: checked by the tool)


class ToolCall(TypedDict, total=False):
    """One tool call of an assistant message, as the Chat Completions API spells it (as a
    model sent it: a key may be missing)."""

    id: str
    type: str
    function: ToolFunction


class Usage(TypedDict, total=False):
    """Tokens a model call (or a run, summed) used; `estimated` when the server sent none."""

    prompt_tokens: int
    completion_tokens: int
    estimated: bool


class SubAgentInfo(TypedDict, total=False):
    """What a sub-agent's run and its result message say of it."""

    branch: str
    commit_id: str | None
    run_id: str
    status: str
    final_text: str
    label: str
    parent_branch: str
    parent_turn_id: str
    base_commit_id: str
    root_run_id: str  # a model-spawned child's: the user's run it serves (fair shares)
    files: list[FileChip]  # a result's: what the child changed (its chips in the parent)
    depth: int  # levels below the user's run (a child the model spawned: agent/orchestrate.py)
    call_id: str  # the parent's `spawn_sub_agents` call that made it


class MessageExtras(TypedDict, total=False):
    """The keys a kind of message adds; `new_message` leaves out those given as None."""

    tool_calls: list[ToolCall] | None
    reasoning: str | None
    finish_reason: str | None
    usage: Usage | None
    partial: bool | None
    tool_call_id: str | None
    name: str | None
    is_error: bool | None
    sub_agent: SubAgentInfo | None
    upload: list[str] | None
    kind: str | None
    covers: Covers | None


class RewindPoint(TypedDict):
    """Where a files-only rewind took `workdir/` back to: the checkpoint of `run_id` at
    `message_index` (`message_id`: the message there, the bubble that shows the rewind)."""

    run_id: str
    message_index: int
    message_id: str | None
    commit_id: str


class Covers(TypedDict):
    """What a compaction's summary stands for (DESIGN §4 "Compaction"): the runs from
    `from_run` to `to_run` (`turns` of them, earlier summaries' included), the branch's
    first `until` messages."""

    from_run: str | None
    to_run: str | None
    turns: int
    until: int


class MessageRecord(TypedDict):
    """One file under history/: `{id, role, content, run_id, created_at, ...}`."""

    id: str
    role: str
    content: str | None
    run_id: str | None
    created_at: str
    tool_calls: NotRequired[list[ToolCall]]  # an assistant's
    reasoning: NotRequired[str]  # an assistant's thinking (`reasoning_content`)
    finish_reason: NotRequired[str | None]
    usage: NotRequired[Usage]
    partial: NotRequired[bool]  # an answer whose stream broke off
    tool_call_id: NotRequired[str]  # a tool result's
    name: NotRequired[str | None]  # a tool result's tool
    is_error: NotRequired[bool]
    sub_agent: NotRequired[SubAgentInfo]  # a sub-agent's result
    upload: NotRequired[list[str]]  # an upload's paths
    kind: NotRequired[str]  # a revert note's
    reverted_run_id: NotRequired[str]  # a revert note's
    rewound_to: NotRequired[RewindPoint]  # a files-only rewind's note (its id: the rewind's)
    copied_from: NotRequired[str | None]  # a fork's copy of the source run's message
    covers: NotRequired[Covers]  # a compaction's summary (kind "compaction")


def new_message(role: str, run_id: str | None, content: str | None,
                **extra: Unpack[MessageExtras]) -> MessageRecord:
    """A new message of `run_id`, now; the `extra` keys given as None are left out."""
    made = {"id": new_message_id(), "role": role, "content": content, "run_id": run_id,
            "created_at": now_iso(), **{k: v for k, v in extra.items() if v is not None}}
    return cast(MessageRecord, made)


class ContextParts(TypedDict):
    """The estimated tokens of each part of a model call (the turn's count, on hover)."""

    system: int
    instructions: int
    tools: int
    summary: int
    messages: int


class ContextUse(TypedDict, total=False):
    """What a model call's context held (context.fit), kept in the run record."""

    budget: int
    sent_messages: int
    omitted_messages: int
    tokens: int
    masked_messages: int  # old tool results sent as a marker
    summarized_messages: int  # the branch's messages a summary stood for
    summary_run_id: str  # the compaction run whose summary was sent
    instructions: str  # the AGENTS.md blob in effect
    server_instructions: bool  # the operator's BRAID_INSTRUCTIONS file was sent
    parts: ContextParts


class MergeInfo(TypedDict):
    """A merge turn's record of what it merged."""

    branches: list[str]
    strategy: str
    conflicts: list[str]
    resolved: NotRequired[list[str]]  # the conflicted files the user resolved by hand


class RunRecord(TypedDict):
    """One file under runs/: a run's status, lineage, model and usage."""

    run_id: str
    session_id: str
    status: str
    branch: str | None
    model: str | None
    usage: Usage
    created_at: str
    updated_at: str
    forked_from_run_id: str | None
    forked_from_message_index: int | None
    regenerated_from: str | None
    error: str | None
    message_count: int
    parent_run_id: str | None
    endpoint: NotRequired[str]
    kind: NotRequired[str]  # "upload", "sub-agent-result", "compaction"
    summary: NotRequired[str]  # a compaction's
    covers: NotRequired[Covers]  # a compaction's
    sub_agent: NotRequired[SubAgentInfo]
    continue_from: NotRequired[str | int]
    context: NotRequired[ContextUse]
    warning: NotRequired[str]
    skipped: NotRequired[list[Skipped]]
    reverted: NotRequired[bool]
    messages: NotRequired[list[MessageRecord]]  # a legacy record's own messages
    resumed_from_message_index: NotRequired[int]
    resumes_run_id: NotRequired[str]  # an earlier interrupted run this one goes on with
    # The run that went on with this one at the branch's end: its Resume is spent. Written
    # with that run's first files (its pending ones, then its first checkpoint).
    resumed_by_run_id: NotRequired[str]
    regenerated_by: NotRequired[str]
    reverted_at: NotRequired[str]
    revert_forced: NotRequired[bool]
    reverted_paths: NotRequired[list[str]]
    unreverted_at: NotRequired[str]
    undone_revert_commit_id: NotRequired[str]
    reverted_files: NotRequired[list[str]]  # the turn's files standing reverted (per file)
    keep_files: NotRequired[bool]  # a fork that kept the source branch's current files
    merge: NotRequired[MergeInfo]
    # The model's last `spawn_sub_agents` call (agent/orchestrate.py): its journal (which
    # children exist, which finished) and the tokens all its children used, summed.
    spawn: NotRequired[SpawnJournal]
    sub_agents_usage: NotRequired[Usage]


class SpawnChild(TypedDict, total=False):
    """One child of a `spawn_sub_agents` call, as its journal keeps it."""

    label: str
    prompt: str
    branch: str
    run_id: str | None
    status: str  # PENDING (not run yet), RUNNING, then the run's final status
    final_text: str
    commit_id: str | None
    files: list[FileChip]
    usage: Usage
    error: str | None


class SpawnJournal(TypedDict):
    """A `spawn_sub_agents` call in its parent's run record: what a resume needs."""

    call_id: str
    base_commit_id: str | None
    children: list[SpawnChild]


class RunFields(TypedDict, total=False):
    """What a kind of turn adds to its record as it opens (`turn_context.open_turn`)."""

    model: str | None
    parent_run_id: str | None
    sub_agent: SubAgentInfo
    merge: MergeInfo


def new_run(run_id: str, session_id: str, branch: str, *, status: str = "RUNNING",
            created_at: str | None = None, message_count: int = 0,
            forked_from_run_id: str | None = None,
            forked_from_message_index: int | None = None, regenerated_from: str | None = None,
            parent_run_id: str | None = None) -> RunRecord:
    """A run's record as it opens; a kind of run then sets its own keys (`kind`...)."""
    at = created_at or now_iso()
    run: RunRecord = {
        "run_id": run_id, "session_id": session_id, "status": status, "branch": branch,
        "model": None, "usage": {}, "created_at": at, "updated_at": at,
        "forked_from_run_id": forked_from_run_id,
        "forked_from_message_index": forked_from_message_index,
        "regenerated_from": regenerated_from, "error": None,
        "message_count": message_count, "parent_run_id": parent_run_id,
    }
    return run


class SourceMeta(TypedDict, total=False):
    """Where an imported session comes from (`session.json`'s `source`)."""

    kind: str  # "folder" | "git"
    path_or_url: str
    ref: str | None
    base_commit: str | None


class SkippedFile(TypedDict):
    """A file an import (or an update from the source) left out, and its size."""

    path: str
    reason: str
    size: int


class ImportSummary(TypedDict):
    """What an import took (`session.json`'s `import`)."""

    files: int
    bytes: int
    skipped: list[SkippedFile]
    skipped_count: int


# `session.json`: who owns the session and where it comes from (`import` is a keyword: the
# functional form).
SessionMeta = TypedDict("SessionMeta", {
    "session_id": str, "title": str, "user_id": str, "created_at": str,
    "forked_from_session_id": str | None,
    "root_session_id": str | None,  # a root session's is its own id
    "model": NotRequired[str | None],
    "endpoint": NotRequired[str | None],
    "archived": NotRequired[bool],
    "updated_at": NotRequired[str],
    "source": NotRequired[SourceMeta],
    "import": NotRequired[ImportSummary],
    "approvals": NotRequired[str],  # auto (absent) | shell | writes
    "approvals_always": NotRequired[list[str]],  # tools the user answered "always"
    "tools_off": NotRequired[list[str]],  # tools the model is not offered in this session
    "shell_network": NotRequired[str],  # ask (absent) | on | off (DESIGN §4 "The shell")
    "shell_network_hosts": NotRequired[list[str]],  # hosts the user allowed (agent/network.py)
})


def new_session_meta(session_id: str, title: str, user_id: str, *,
                     forked_from_session_id: str | None = None,
                     root_session_id: str | None = None) -> SessionMeta:
    meta: SessionMeta = {
        "session_id": session_id, "title": title, "user_id": user_id,
        "created_at": now_iso(),
        "forked_from_session_id": forked_from_session_id,
        "root_session_id": root_session_id or session_id}
    return meta


# -- what stays on disk while an operation runs (store/journal.py, sources/exporting.py) -----


class IntentExtras(TypedDict, total=False):
    untracked: list[str]  # folders whose untracked files a rollback removes
    to: str  # a checkout's target branch


class IntentRecord(IntentExtras, total=True):
    """The intent record (store/journal.py): what a multi-file operation is about to change,
    so a kill in the middle is finished or rolled back at start-up."""

    op: str
    kind: str
    branch: str
    head: str | None
    paths: list[str]


class ExportRecord(TypedDict, total=False):
    """The record that makes an export to a folder all-or-nothing (`.git/braid-export`)."""

    folder: str
    tmp: str
    ref: str
    state: str
    phase: str  # "staging" | "moving"
    written: list[str]
    deleted: list[str]
    ino: int
    writes: list[list[str]]  # [private name, path]
    deletes: list[list[str]]  # [path, private name]


# -- the index's rows (store/index.py, backends/pg_index.py) ---------------------------------


class SessionRow(TypedDict):
    """A row of the index's `sessions` table."""

    session_id: str
    user_id: str
    title: str
    created_at: str
    updated_at: str
    forked_from_session_id: str | None
    root_session_id: str | None
    archived: bool
    model: str | None


class RunLineage(TypedDict):
    """A run's place among its siblings: the keys the index, `session_info` and a continue
    give of it (the switcher and the readable names are made of them)."""

    run_id: str
    status: str
    branch: str | None
    forked_from_run_id: str | None
    forked_from_message_index: int | None
    regenerated_from: str | None
    created_at: str


class RunRow(RunLineage):
    """A row of the index's `runs` table (a run record's indexed keys)."""

    session_id: str
    updated_at: str | None


class QueueRow(TypedDict):
    """A row of the index's `queued_messages` table (store/queue.py): a message waiting for
    its branch, or (`claimed_by` set) one a process is starting as a turn."""

    queued_id: str
    session_id: str
    branch: str
    text: str
    created_at: str
    claimed_by: str | None


class RunRef(TypedDict):
    run_id: str
    branch: str | None


class Siblings(TypedDict):
    """A run's place among its sibling runs (the page's `‹ 2/3 ›`, lineage.sibling_map)."""

    position: int
    count: int
    prev: RunRef | None
    next: RunRef | None


# -- a file a turn changed (its chip on the page) --------------------------------------------


class FileChip(TypedDict):
    """A file a turn changed, as its chip shows it."""

    path: str
    status: str  # "added" | "modified" | "deleted"


# -- the model's request (model/client.py) ---------------------------------------------------


class ToolSpec(TypedDict):
    name: str
    description: str
    parameters: dict[str, object]  # a JSON Schema


class ToolSchema(TypedDict):
    """One entry of a request's `tools` (agent.tools.Workspace.schemas)."""

    type: str
    function: ToolSpec


class ModelMessage(TypedDict):
    """A message as a request carries it (model.messages.shape): what every server takes."""

    role: str
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    reasoning_content: NotRequired[str]
    tool_call_id: NotRequired[str]


class ModelEntry(TypedDict):
    """A model an endpoint serves (or, `id` None, the endpoint's error listing them)."""

    id: str | None
    endpoint: str
    error: NotRequired[str]
    ref: NotRequired[str]  # the choice that names it (`id@endpoint` where ids repeat)


class ConnectionRecord(TypedDict):
    """One of a user's own connections as the users backend keeps it (store/users.py): a
    model endpoint (`kind` "model": its key in `secret["api_key"]`, its `models`) or an HTTP
    MCP server (`kind` "mcp": its headers in `secret`). `secret` never leaves the server:
    pages and the API see a `ConnectionView` (results.py)."""

    kind: str
    name: str
    url: str
    secret: dict[str, str]
    models: list[str]
    created_at: str
