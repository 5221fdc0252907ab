"""Checkpoints of a run: where a run's messages are, which message indexes are tool-call safe,
and which commit holds "run R at its first K messages" (DESIGN §4 "Continue / fork a run").

A run's messages are the files of its branch's `history/` tagged with its `run_id`; each of
its checkpoint commits carries `Braid-Run` and `Braid-Message-Index` (how many of the run's
messages it holds). Walking the branch's first parents from its tip finds them: the `turn`
commit at the end, `tool-batch` commits in between, a fork's first `fork` commit; the walk
ends at the commit before the run (the newest one that does not hold the run's record).
An index with no exact commit (K=1, the user message only) takes the newest checkpoint below
it, else the commit before the run. Everything here reads git only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pygit2

from server.base.errors import BadRequest, NotFound
from server.base.records import MessageRecord, RunRecord
from server.base.results import CheckpointRow
from server.git.commits import commit_info, first_parent_line
from server.git.session import GitSession
from server.store import layout
from server.store.layout import CHECKPOINT_KINDS, StoredMessage, run_entries

PREVIEW_CHARS = 80


@dataclass
class RunOnBranch:
    """A run as the branch it lives on holds it."""

    run_id: str
    record: RunRecord
    record_path: str
    branch: str
    tip: pygit2.Commit
    entries: list[StoredMessage]
    git: GitSession | None = field(default=None, repr=False, compare=False)
    # run_checkpoints(), walked once per view.
    line: tuple[list[tuple[int, pygit2.Commit]], pygit2.Commit] | None = field(
        default=None, repr=False, compare=False)

    @property
    def messages(self) -> list[MessageRecord]:
        return [e.message for e in self.entries]


def locate_run(git: GitSession, run_id: str) -> RunOnBranch:
    """Find the run on its own branch (the one its record names), else on any branch."""
    current = git.branch
    names = sorted(git.branches(), key=lambda n: (n != current, n != "main", n))
    fallback: tuple[str, pygit2.Commit, str, RunRecord] | None = None
    for name in names:
        tip = git.commit(git.branch_tip(name))
        path = layout.find_run_path(git, run_id, tip)
        if path is None:
            continue
        record = git.read_json(tip, path)
        if record.get("branch") == name:
            fallback = (name, tip, path, record)
            break
        fallback = fallback or (name, tip, path, record)
    if fallback is None:
        raise NotFound(f"no run {run_id}")
    name, tip, path, record = fallback
    return RunOnBranch(run_id, record.copy(), path, name, tip, run_entries(git, tip, run_id),
                       git=git)


def safe_indexes(messages: list[MessageRecord]) -> list[int]:
    """Every index K whose first K messages hold no tool call without its result."""
    out = [0]
    open_calls: set[str] = set()
    for i, msg in enumerate(messages, 1):
        if msg.get("role") == "assistant":
            open_calls.update(str(c.get("id")) for c in msg.get("tool_calls") or ())
        elif msg.get("role") == "tool":
            open_calls.discard(str(msg.get("tool_call_id")))
        if not open_calls:
            out.append(i)
    return out


def resolve_index(messages: list[MessageRecord], continue_from: str | int,
                  regenerate: bool) -> int:
    count = len(messages)
    if continue_from == "end":
        k = count
    elif continue_from == "last_user":
        k = max((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    else:
        assert isinstance(continue_from, int)
        k = continue_from
        if not 0 <= k <= count:
            raise BadRequest(f"continue_from {k} is outside 0..{count} (the run's messages)",
                             {"message_count": count})
    if regenerate:
        # Only trailing answers go: tool calls and their results are kept, never re-run.
        while k > 0 and messages[k - 1].get("role") == "assistant" \
                and not messages[k - 1].get("tool_calls"):
            k -= 1
    return max(i for i in safe_indexes(messages) if i <= k)


def run_checkpoints(view: RunOnBranch) -> tuple[list[tuple[int, pygit2.Commit]], pygit2.Commit]:
    """The run's checkpoints on its branch, newest first, as (message index, commit), and the
    commit before the run (the newest one that does not hold the run's record yet)."""
    if view.line is not None:
        return view.line
    if view.git is None:
        view.line = _walk_checkpoints(view)
        return view.line
    repo = view.git.repo
    oids, end = view.git.lines.get(view.tip.id)
    # The record is on the line from the run's first commit to the tip: find that commit by
    # bisection, then read forward over the run's own commits only.
    lo, hi = 0, end
    while lo < hi:
        mid = (lo + hi) // 2
        if layout.holds_record(repo[oids[mid]].peel(pygit2.Commit), view.record_path):
            hi = mid
        else:
            lo = mid + 1
    before = repo[oids[lo - 1] if lo > 0 else oids[lo]].peel(pygit2.Commit)
    found: list[tuple[int, pygit2.Commit]] = []
    for i in range(lo, end + 1):
        commit = repo[oids[i]].peel(pygit2.Commit)
        info = commit_info(commit)
        if info.message_index is None or \
                not layout.is_run_commit(info.kind, info.run_id, kinds=CHECKPOINT_KINDS):
            continue
        if info.run_id == view.run_id:
            found.append((info.message_index, commit))
        elif info.run_id:
            break  # a later run's checkpoint: this run's are all behind it
    view.line = (found[::-1], before)
    return view.line


def _walk_checkpoints(view: RunOnBranch
                      ) -> tuple[list[tuple[int, pygit2.Commit]], pygit2.Commit]:
    found: list[tuple[int, pygit2.Commit]] = []
    before = view.tip
    for commit in first_parent_line(view.tip):
        before = commit
        if not layout.holds_record(commit, view.record_path):
            break
        info = commit_info(commit)
        if info.message_index is not None and layout.is_run_commit(
                info.kind, info.run_id, view.run_id, CHECKPOINT_KINDS):
            found.append((info.message_index, commit))
    return found, before


def find_checkpoint(git: GitSession, view: RunOnBranch, k: int
                    ) -> tuple[pygit2.Commit, str | None]:
    """The commit holding "the run at its first K messages": its newest checkpoint with at most
    K messages, else the commit before the run. Returns it with the run whose messages are at
    its history's end (None for the commit before the run). A fork's copied prefix (K below
    its fork index) is found in its source run, where those states were committed."""
    source_id = view.record.get("forked_from_run_id")
    fork_index = view.record.get("forked_from_message_index")
    if isinstance(source_id, str) and isinstance(fork_index, int) and k < fork_index:
        try:
            return find_checkpoint(git, locate_run(git, source_id), k)
        except NotFound:
            pass  # the source is gone from this repository: fall back on this run's own line
    found, before = run_checkpoints(view)
    for index, commit in found:  # newest first, so the first fit is the newest best one
        if index <= k:
            return commit, view.run_id
    return before, None


def _preview(messages: list[MessageRecord], k: int) -> str:
    if k == 0:
        return "Before the run"
    msg = messages[k - 1]
    text = str(msg.get("content") or "")
    if msg.get("role") == "assistant" and msg.get("tool_calls") and not text:
        names = [(c.get("function") or {}).get("name") or "?" for c in msg["tool_calls"]]
        text = "calls " + ", ".join(names)
    elif msg.get("role") == "tool":
        text = f"{msg.get('name') or 'tool'}: {text}"
    text = " ".join(text.split())
    return f"{msg.get('role')}: {text[:PREVIEW_CHARS]}"


def checkpoint_timeline(git: GitSession, run_id: str) -> list[CheckpointRow]:
    view = locate_run(git, run_id)
    out: list[CheckpointRow] = []
    for k in safe_indexes(view.messages):
        commit, owner = find_checkpoint(git, view, k)
        info = commit_info(commit)
        out.append({
            "message_index": k, "commit_id": info.id, "kind": info.kind,
            "exact": owner is not None and info.message_index == k,
            "created_at": datetime.fromtimestamp(commit.commit_time, UTC).isoformat()
            .replace("+00:00", "Z"),
            "preview": _preview(view.messages, k),
        })
    return out
