"""Typed results: what the core's calls return (the actions' results), what the page shows
of a session (a transcript, a turn's summary, the commit graph) and the events the core
publishes and the web renders. TypedDicts like the records they are made of (records.py):
plain dicts at runtime, every key checked by mypy."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from server.base.records import (
    FileChip,
    ImportSummary,
    MessageRecord,
    ModelEntry,
    RewindPoint,
    RunLineage,
    RunRecord,
    RunRow,
    SessionRow,
    Siblings,
    Skipped,
    SkippedFile,
    SourceMeta,
    SubAgentInfo,
    ToolCall,
    Usage,
)

# -- what the page shows of a session (features/sessions.py) ---------------------------------


class RunSummary(TypedDict, total=False):
    """The keys of a run a turn shows when its record is not at hand (a partial record)."""

    run_id: str
    status: str
    branch: str | None
    sub_agent: SubAgentInfo


class WaitingCall(TypedDict):
    """A tool call waiting for the user's approval (agent/approvals.py): `approval_needed`'s
    payload, kept on its live run while it waits. `shown_in`: the run whose bubble shows it
    (a sub-agent's call shows in the foreground run's); `diff`: a file tool's change."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, object] | str
    shown_in: str
    branch: str
    diff: NotRequired[str]
    label: NotRequired[str]  # a sub-agent's


class TranscriptItem(TypedDict, total=False):
    """A transcript's item: a turn (a user message and the answer's messages) or a note (a
    system message such as a revert notice)."""

    type: str  # "turn" | "note"
    message: MessageRecord  # a note's
    run_id: str | None
    user: MessageRecord | None
    parts: list[MessageRecord]
    run: RunRecord | RunRow | RunSummary
    files: list[FileChip]
    siblings: Siblings | None
    streaming: bool
    live_text: str  # a live turn's text streamed so far (web.live)
    just_ended: bool  # drawn by its end event: a long answer stays whole under its reader
    waiting: list[WaitingCall]  # a live turn's tool calls waiting for approval (web.live)
    live_output: dict[str, str]  # a live turn's running commands' output so far, by call id
    children: list[ChildCard]  # the sub-agents it spawned, as cards in its bubble


class ChildCard(TypedDict, total=False):
    """A sub-agent as its card in the parent's bubble shows it (web/render/events.py
    `child_cards`): from its live run, its run record or its parent's records."""

    run_id: str
    parent_run_id: str  # the run whose bubble shows it
    call_id: str | None  # the parent's spawn_sub_agents call (None: the user's spawn)
    branch: str
    label: str
    status: str
    prompt: str
    final_text: str
    live_text: str  # what it streams now (a page opened mid-run)
    error: str | None
    commit_id: str | None
    files: list[FileChip]
    usage: Usage | None
    children: list[ChildCard]  # the ones it spawned itself


class Transcript(TypedDict):
    """The newest turns of a branch (before a message): what the page shows and scrolls."""

    commit_id: str
    turns: list[TranscriptItem]
    start: int
    has_more: bool
    total: int
    rewinds: NotRequired[dict[str, str]]  # user message id → its standing files-only rewind
    session_id: NotRequired[str]


class BranchHead(TypedDict):
    name: str
    head: str


class RunSummaryRow(RunLineage):
    """A run as `session_info` lists it."""


# `GET /api/sessions/{id}`.
SessionInfo = TypedDict("SessionInfo", {
    "session_id": str, "title": str, "user_id": str, "archived": bool, "model": str | None,
    "forked_from_session_id": str | None, "root_session_id": str | None,
    "created_at": str | None, "head": str, "branch": str, "branches": list[BranchHead],
    "source": SourceMeta | None, "import": ImportSummary | None,
    "runs": NotRequired[list[RunSummaryRow]],
    "running": NotRequired[dict[str, str]],
    "model_in_use": NotRequired[str],
    "endpoint": NotRequired[str],
    "approvals": NotRequired[str],  # auto | shell | writes (agent/approvals.py)
    "approvals_always": NotRequired[list[str]],  # tools answered "always"
    "tools_off": NotRequired[list[str]],  # tools switched off for this session
    "shell_network": NotRequired[str],  # ask | on | off (agent/network.py)
    "shell_network_hosts": NotRequired[list[str]],  # hosts the user allowed
})


class CheckpointRow(TypedDict):
    """One place a run can be continued from (checkpoints.checkpoint_timeline)."""

    message_index: int
    commit_id: str
    kind: str | None
    exact: bool
    created_at: str
    preview: str


# -- the commit graph (features/dag.py) ------------------------------------------------------


class CommitNode(TypedDict):
    """A commit as the DAG and its node view show it (git.commits.CommitInfo)."""

    id: str
    parent_ids: list[str]
    parent_id: str | None
    kind: str
    run_id: str | None
    message_index: int | None
    summary: str
    created_at: int  # seconds since the epoch


class DagNode(CommitNode, total=False):
    """A commit of the graph: its own fields, the branch it belongs to and, once labelled,
    the branch tips on it and its label."""

    branch: str
    tips: list[str]
    label: str


class DagBranch(TypedDict):
    name: str
    head: str
    result: NotRequired[str]  # a sub-agent branch's answer
    sub_agent: NotRequired[bool]


class DagGraph(TypedDict):
    """Every commit reachable from a branch, newest first, and the branches."""

    nodes: list[DagNode]
    branches: list[DagBranch]
    head: str
    current_branch: str


class NodeView(TypedDict):
    """One commit as the graph's panel shows it: the chat and the files at that point."""

    commit: CommitNode
    transcript: Transcript
    run: RunRecord | None
    files: list[str]
    files_total: int
    branches: list[str]
    tips: list[str]


# -- what the core's calls return (the actions' results) -------------------------------------


# What creating (or importing) a session returns.
CreatedSession = TypedDict("CreatedSession", {
    "session_id": str, "title": str,
    "source": NotRequired[SourceMeta], "import": NotRequired[ImportSummary],
})


class ForkedSession(TypedDict):
    """A fork's lineage, as forking returns it."""

    session_id: str
    forked_from_session_id: str
    root_session_id: str | None
    title: str


class SessionList(TypedDict):
    sessions: list[SessionRow]


class SearchHit(TypedDict):
    """A message found by `GET /api/search`: where it is (session, run, its index in the
    run) and its words around the match, each matched word marked `«word»`."""

    session_id: str
    title: str
    run_id: str
    message_index: int
    role: str
    snippet: str


class SearchResults(TypedDict):
    results: list[SearchHit]


class ToolInfo(TypedDict):
    """A tool the session's model may be offered (`list_tools`): `server` is None for a
    built-in one; `tokens`, what its definition costs of the context budget."""

    name: str
    server: str | None
    description: str
    read_only: bool
    off: bool
    tokens: int


class ToolList(TypedDict):
    tools: list[ToolInfo]
    unavailable: dict[str, str]  # a configured MCP server whose tools are not offered: why


class SessionChanges(TypedDict, total=False):
    """What `update_session` changes: a new title, archived or not, a model (None: the
    server's default)."""

    title: str
    archived: bool
    model: str | None
    approvals: str
    # Set by `approve_tool_call` (always); a client sends a shorter list to take one back.
    approvals_always: list[str]
    tools_off: list[str]  # tools the model is not offered in this session
    shell_network: str  # ask | on | off: a sandboxed command's web access
    shell_network_hosts: list[str]  # hosts allowed (approved; a client may take them back)


class ApprovalResult(TypedDict):
    """`approve_tool_call`'s result."""

    run_id: str
    call_id: str
    decision: str


class ShownBranch(TypedDict):
    """The branch a session shows now and its tip (a checkout's result)."""

    branch: str
    head: str


class InstructionsShown(TypedDict):
    """The instructions in effect on the shown branch (the header's chip)."""

    path: str | None  # AGENTS.md, or None: the branch has none
    size: int
    cut: bool  # past 32 KiB: only the first part is sent
    server: bool  # the operator's BRAID_INSTRUCTIONS file is sent too


class RunStarted(TypedDict):
    """`send_message` over the socket: the run's id at once (its events follow)."""

    run_id: str


class QueuedMessage(TypedDict):
    """A message waiting for its branch to be free (`list_queue`, `queue_changed`)."""

    queued_id: str
    text: str
    created_at: str


class Queued(TypedDict):
    """`send_message {queue: true}` on a busy branch, `update_queued`, `cancel_queued`."""

    queued_id: str


class QueueList(TypedDict):
    """`list_queue`: the session's waiting messages, oldest first."""

    queued: list[QueuedMessage]


class RunStatus(TypedDict):
    """A run and its status: what stopping one returns."""

    run_id: str
    status: str


class ContinueResult(RunLineage):
    """The run a continue started (time travel): its place and where it came from."""

    forked: bool
    message_index: int
    source_run_id: str


class ContinuedRun(RunRecord):
    """A continued run at its end (`POST /api/runs/{id}/continue`): its record and messages,
    and where it came from."""

    forked: NotRequired[bool]
    message_index: NotRequired[int]
    source_run_id: NotRequired[str]


class CheckpointList(TypedDict):
    run_id: str
    checkpoints: list[CheckpointRow]


class Conflicted(TypedDict):
    """A path a revert or a merge cannot take without losing a later change: each side's
    text (a merge's: its blob id)."""

    path: str
    ours: str | None
    theirs: str | None
    branch: NotRequired[str]  # a merge's: the branch merged in (`theirs`)
    into: NotRequired[str]  # a merge's: the branch merged into (`ours`)
    before: NotRequired[list[str]]  # a merge's: branches merged into `ours` ahead of `branch`
    editable: NotRequired[bool]  # a merge's: UTF-8 text shown whole, to edit by hand
    merged: NotRequired[str | None]  # a merge's: the file with conflict markers
    resolved: NotRequired[bool]  # a merge's: settled by the user's own text
    resolution: NotRequired[str | None]  # that text


class RevertResult(TypedDict):
    """What reverting (or redoing) a turn did (features/revert.py)."""

    turn_id: str
    run_id: str
    commit_id: str
    restored_paths: list[str]
    reverted: bool
    run: NotRequired[RunRecord]  # the turn's record (a files-only rewind has none)
    note: MessageRecord
    conflicts: NotRequired[list[Conflicted]]
    files: NotRequired[list[FileChip]]
    rewind: NotRequired[RewindPoint]  # a files-only rewind's (rewind_files) or its undo's


class TurnFiles(TypedDict):
    """The files a turn changed, and whether it is reverted."""

    turn_id: str
    paths: list[FileChip]
    reverted: bool
    reverted_files: list[str]  # which of them stand reverted (a per-file revert)


class TurnDiff(TypedDict):
    """A turn's changes as one unified diff (of one `path`, or all)."""

    turn_id: str
    path: str | None
    diff: str
    paths: list[FileChip]


class SubAgentResult(TypedDict):
    """How a sub-agent ended: what spawning one returns and its `sub_agent_done` sends."""

    branch: str
    label: str
    run_id: str
    status: str
    final_text: str
    error: str | None
    commit_id: str | None
    parent_branch: str
    parent_turn_id: str
    files: NotRequired[list[FileChip]]  # what the child changed
    summary_run_id: NotRequired[str]
    summary_commit_id: NotRequired[str]


class SubAgentSummary(TypedDict):
    """The sub-agent's result as written on the parent branch (subagents.write_result)."""

    run_id: str
    run: RunRecord
    message: MessageRecord
    commit_id: str


class MergeResult(TypedDict):
    """A merge turn that ran to its end."""

    commit_id: str
    parent_ids: list[str]
    final_text: str
    conflicts: list[Conflicted]
    run_id: str
    status: str
    branches: list[str]
    strategy: str


class ToolConflict(TypedDict):
    """A conflicted file as the model's `merge_branches` tool reads it."""

    path: str
    ours: str | None
    theirs: str | None
    branch: str


class ToolMerge(TypedDict):
    """What the model's `merge_branches` tool did (agent/orchestrate.py): the merge commit and
    its parents, or (`commit_id` None) the conflicts that refused it."""

    commit_id: str | None
    parent_ids: list[str]
    branches: list[str]
    strategy: str
    conflicts: list[ToolConflict]


class UsageTotal(TypedDict):
    """The tokens a branch's turns used, added up."""

    prompt_tokens: int
    completion_tokens: int
    estimated: bool
    total_tokens: NotRequired[int]


class ModelList(TypedDict):
    """The models to choose from, and the default's choice."""

    models: list[ModelEntry]
    default: str


class ModelInUse(TypedDict):
    """The model a session's next turn uses."""

    id: str
    endpoint: str
    ref: str
    chosen: bool  # the session chose it (else: the default)


class UploadMade(TypedDict):
    """An upload's commit: its run, its one message and the paths it put in workdir/."""

    run_id: str
    run: RunRecord
    messages: list[MessageRecord]
    paths: list[str]
    commit_id: str


class UploadResult(TypedDict):
    run_id: str
    commit_id: str
    paths: list[str]


class PathConflict(TypedDict):
    """A path an update or an export could not take as is: each side's state."""

    path: str
    ours: str
    theirs: str


class SyncResult(TypedDict):
    """What updating a session from its source did."""

    changed: bool
    updated_paths: list[str]
    conflicts: list[PathConflict]
    commit_id: str | None
    base_commit: str | None
    skipped: list[SkippedFile]


class FolderExport(TypedDict):
    """What exporting to a folder wrote and left."""

    path: str
    written: list[str]
    deleted: list[str]
    conflicts: list[PathConflict]
    skipped: list[Skipped]


class BranchExport(TypedDict):
    """What exporting to a branch of the source repository made."""

    branch: str
    commits: list[str]
    head: str
    base_commit: str
    update: str  # "created" | "unchanged" | "fast-forward"


# -- events (base/events.py): published by the core, rendered by the web ---------------------


class EventData(TypedDict, total=False):
    """An event's payload: the keys each event sends (`session_id` is added on publishing).

    One shape for every event, its keys optional: an event names the few it sends (a
    turn's `run_started` its run and messages, `message_delta` a delta, `merged` the
    branches...), and a renderer reads the ones its event sends."""

    session_id: str
    run_id: str
    run: RunRecord | RunRow
    status: str
    error: str | None
    reason: str
    branch: str
    head: str
    messages: list[MessageRecord]
    message: MessageRecord
    message_id: str
    delta: str
    text: str  # `tool_output`: a running command's output as it comes
    call: ToolCall
    siblings: Siblings | None
    files: list[FileChip]
    titled: bool
    commit_id: str | None
    kind: str
    skipped: list[Skipped]
    forked: bool
    source_run_id: str
    message_index: int
    parent_ids: list[str]
    rewind: RewindPoint  # `reverted` of a files-only rewind or its undo
    branches: list[str]
    strategy: str
    conflicts: list[Conflicted]
    label: str
    prompt: str
    parent_turn_id: str
    parent_branch: str
    final_text: str
    summary: SubAgentSummary
    summary_run_id: str
    summary_commit_id: str
    shown_branch: str
    turn_id: str
    restored_paths: list[str]
    reverted: bool
    note: MessageRecord
    changes: list[str]
    paths: list[str]
    tool: str
    args: dict[str, object] | str
    diff: str
    shown_in: str
    decision: str
    # queue_changed: what changed (added, updated, removed, started), the message added or
    # edited (`queued`), the ids waiting now in order.
    queued: list[QueuedMessage]
    change: str
    queued_id: str
    ids: list[str]
    # A child the model spawned (agent/orchestrate.py): its parent's run and tool call
    # (call_id: also the call an approval_needed / approval_resolved is about).
    parent_run_id: str | None
    call_id: str | None
    depth: int | None
    resumed: bool
    usage: Usage


# Every event of DESIGN §5, by name; base/events.py makes each (one constructor an event),
# web/render/event_table.py says how each reaches a page and a script.
EventName = Literal[
    "run_started", "message_delta", "tool_call", "tool_result", "tool_output", "checkpoint",
    "run_completed", "run_error", "run_cancelled", "reverted", "sub_agent_started",
    "sub_agent_done", "merged", "dag_changed", "session_changed", "run_continued",
    "session_updated", "session_deleted", "files_uploaded", "approval_needed",
    "approval_resolved", "queue_changed",
]


class EventFrame(TypedDict):
    """What the bus hands each subscriber: `{type: "event", event, data}`."""

    type: Literal["event"]
    event: EventName
    data: EventData


class ConnectionView(TypedDict):
    """A user's connection as the page and the API show it: the URL with any credential in
    it as ***, whether a key or headers are set, never what they are."""

    kind: str  # "model" | "mcp"
    name: str
    url: str
    models: list[str]
    secret_set: bool  # a key (model) or headers (mcp) are kept
    created_at: str


class ConnectionList(TypedDict):
    """The user's connections (`GET /api/connections`), model endpoints first."""

    connections: list[ConnectionView]
