"""The repository layout (DESIGN §3): where a branch's messages and run records live, read
forward and backward, and where new ones go. Every reader of `history/` and `runs/` is here;
`GitSession` is the plumbing under it and `history.py` the listings that keep these reads
O(change) (kept with the open session, `git.listings`).

    history/AAA/BB/<seq>-<role>-<message_id>.json   one file per message (seq per branch)
    runs/AAA/BB/<run_id>.json                       a run record, by the run's ordinal

A session written with the earlier layout (`history/NNN/…`) keeps it: the layout of a tree
is read from the tree, and new files are placed in it (`is_legacy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2

from server.base.records import MessageRecord, RunRecord, Usage
from server.git import lookup
from server.git.history import HISTORY, RUNS, ListedFile, history_path, run_path

if TYPE_CHECKING:
    from server.git.session import GitSession
    from server.store.context import Sums

__all__ = [
    "StoredMessage",
    "answer_of",
    "find_run_path",
    "holds_copies",
    "is_legacy",
    "last_answer",
    "message_files",
    "message_path",
    "message_sums",
    "messages",
    "new_run_path",
    "next_message_path",
    "next_seq",
    "run_count",
    "run_entries",
    "run_records",
    "run_usages",
    "runs",
    "stored_messages",
    "window_sums",
]


@dataclass(frozen=True)
class StoredMessage:
    """One message file of a branch's history: where it is, its seq, the message."""

    path: str
    seq: int
    message: MessageRecord


def _tree(git: GitSession, commit: pygit2.Commit | None, top: str) -> pygit2.Tree | None:
    return lookup.subtree((commit or git.head_commit()).tree, top)


# -- history/ -------------------------------------------------------------------------------


def messages(git: GitSession, commit: pygit2.Commit | None = None) -> Sequence[MessageRecord]:
    """Every message of the branch at `commit` (default HEAD), oldest first, kept in memory
    and moved by what changed. Read only, and the dicts are shared: copy to change."""
    return git.listings.messages(_tree(git, commit, HISTORY), git.blob_json)


def holds_copies(git: GitSession, commit: pygit2.Commit | None = None) -> bool:
    """Whether a message of the branch at `commit` is a copy of another message of it (a run
    resumed at the branch's end), asked of the listing: what the turn added, not the chat."""
    return git.listings.holds_copied(_tree(git, commit, HISTORY), git.blob_json)


def message_sums(git: GitSession, commit: pygit2.Commit | None = None) -> Sequence[int]:
    """Running totals of the token estimates of `messages(git, commit)` (context.py), kept
    with the listing: what the context budget bisects instead of walking the window."""
    from server.store.context import estimate

    return git.listings.sums(_tree(git, commit, HISTORY), git.blob_json, estimate)


def window_sums(git: GitSession, commit: pygit2.Commit | None = None) -> Sums:
    """`message_sums`, with the masked estimates' totals and the maskable messages' count
    (context.py, masking), each kept with the listing and extended by new messages only."""
    from server.store import context

    tree = _tree(git, commit, HISTORY)
    return context.Sums(
        git.listings.sums(tree, git.blob_json, context.estimate),
        git.listings.sums(tree, git.blob_json, context.masked_estimate, "masked"),
        git.listings.sums(tree, git.blob_json, context.is_maskable, "maskable"))


def message_files(git: GitSession,
                  commit: pygit2.Commit | None = None) -> Sequence[ListedFile]:
    """The message files of the branch at `commit` (path, seq, blob), oldest first."""
    return git.listings.get(HISTORY, _tree(git, commit, HISTORY)).entries


def stored_messages(git: GitSession, commit: pygit2.Commit,
                    newest_first: bool = False) -> Iterator[StoredMessage]:
    """The branch's messages at `commit` with their files, from the listing in memory."""
    files = message_files(git, commit)
    parsed = messages(git, commit)
    order = range(len(files) - 1, -1, -1) if newest_first else range(len(files))
    for i in order:
        yield StoredMessage(files[i].path, files[i].seq, parsed[i])


def run_entries(git: GitSession, commit: pygit2.Commit, run_id: str) -> list[StoredMessage]:
    """The run's messages on the branch at `commit`, oldest first. A run's messages are
    contiguous, so the scan runs from the end (in memory) and stops once it has passed them."""
    files = message_files(git, commit)
    parsed = messages(git, commit)
    end = len(parsed)
    while end > 0 and parsed[end - 1].get("run_id") != run_id:
        end -= 1
    start = end
    while start > 0 and parsed[start - 1].get("run_id") == run_id:
        start -= 1
    return [StoredMessage(files[i].path, files[i].seq, parsed[i]) for i in range(start, end)]


def answer_of(msgs: Sequence[MessageRecord]) -> str:
    """The last final answer (an assistant message without tool calls) of `msgs`."""
    for msg in reversed(msgs):
        if msg.get("role") == "assistant" and msg.get("content") and not msg.get("tool_calls"):
            return str(msg["content"])
    return ""


def last_answer(git: GitSession, commit: pygit2.Commit) -> str:
    """The last final answer on the branch at `commit`. Reads the history from its end, so a
    long chat costs no more than a short one."""
    return answer_of(messages(git, commit))


def next_seq(git: GitSession, commit: pygit2.Commit | None = None) -> int:
    """The next message number (one past the newest file)."""
    return git.listings.get(HISTORY, _tree(git, commit, HISTORY)).next_number()


def is_legacy(git: GitSession, commit: pygit2.Commit | None = None) -> bool:
    """The branch's history is in the earlier layout (`history/NNN/…`)."""
    return git.listings.get(HISTORY, _tree(git, commit, HISTORY)).legacy


def message_path(git: GitSession, seq: int, role: str, message_id: str,
                 commit: pygit2.Commit | None = None) -> str:
    """Where message `seq` goes on the branch at `commit`, in that history's layout."""
    return history_path(seq, role, message_id, is_legacy(git, commit))


def next_message_path(git: GitSession, role: str, message_id: str,
                      commit: pygit2.Commit | None = None) -> str:
    """Where one more message goes on the branch at `commit`: the next seq, in its layout."""
    return message_path(git, next_seq(git, commit), role, message_id, commit)


# -- runs/ ----------------------------------------------------------------------------------


def runs(git: GitSession, commit: pygit2.Commit | None = None) -> Iterator[RunRecord]:
    """Every run record on the branch at `commit`, by ordinal."""
    for entry in git.listings.get(RUNS, _tree(git, commit, RUNS)).entries:
        yield git.blob_json(entry.blob)


def run_usages(git: GitSession, commit: pygit2.Commit | None = None) -> list[Usage]:
    """Every run record's `usage` on the branch at `commit`, by ordinal. A record's usage is
    read once per blob (kept with the session: blobs never change), so a turn's footer
    re-reads only the records that changed, not every run's."""
    kept: dict[pygit2.Oid, Usage] = git.caches.setdefault("run_usage", {})
    entries = git.listings.get(RUNS, _tree(git, commit, RUNS)).entries
    if len(kept) > 4 * len(entries) + 1000:
        kept.clear()
    out = []
    for entry in entries:
        usage = kept.get(entry.blob)
        if usage is None:
            read: Usage = git.blob_json(entry.blob).get("usage") or Usage()
            usage = kept[entry.blob] = read
        out.append(usage)
    return out


def find_run_path(git: GitSession, run_id: str,
                  commit: pygit2.Commit | None = None) -> str | None:
    found = git.listings.get(RUNS, _tree(git, commit, RUNS)).find(run_id)
    return found.path if found is not None else None


def run_records(git: GitSession, run_ids: Iterable[str],
                commit: pygit2.Commit | None = None) -> dict[str, RunRecord]:
    """The records of these runs on the branch at `commit` (the ones it holds), read by
    their blobs from the runs' listing: not a walk down the tree by path for each."""
    listing = git.listings.get(RUNS, _tree(git, commit, RUNS))
    out: dict[str, RunRecord] = {}
    for run_id in run_ids:
        found = listing.find(run_id)
        if found is not None:
            out[run_id] = git.blob_json(found.blob)
    return out


def run_count(git: GitSession, commit: pygit2.Commit | None = None) -> int:
    """The next run ordinal (the number of runs when none was ever taken out)."""
    return git.listings.get(RUNS, _tree(git, commit, RUNS)).next_number()


def new_run_path(git: GitSession, run_id: str, commit: pygit2.Commit | None = None) -> str:
    """Where a new run's record goes on the branch at `commit` (the next ordinal, in that
    tree's layout)."""
    listing = git.listings.get(RUNS, _tree(git, commit, RUNS))
    return run_path(listing.next_number(), run_id, listing.legacy)


# -- a run's commits ---------------------------------------------------------------------------
# A run's commits are the commits on a branch's first-parent line whose Braid-Run trailer
# names it, of RUN_KINDS, from its first (the one that adds the run's record: `begins_run`)
# to the newest. Two views read a part of them, each naming its kinds:
# - CHECKPOINT_KINDS, with a message index: the states a run is continued or forked from
#   (checkpoints.py); a fork's first commit is one, an upload's `user-edit` is not.
# - TURN_KINDS: the commits whose file changes are the turn's, which a revert takes out
#   (turn_changes.py). A merge turn begins with its `merge` commit (so reverting it takes
#   the merged files out, like `git revert -m 1`); a sub-agent's result is a `sub-agent`
#   commit; a `user-edit` counts only when it names a run (an upload from the file panel).
#   Not `fork`: a fork's first commit restores its source's files, and a regenerate marks
#   the *source* run with a record-only `fork` commit, which must not stretch that run's
#   span over later reverts.
CHECKPOINT_KINDS = frozenset({"tool-batch", "turn", "fork", "sub-agent", "merge"})
TURN_KINDS = frozenset({"tool-batch", "turn", "merge", "sub-agent", "user-edit"})
RUN_KINDS = CHECKPOINT_KINDS | TURN_KINDS


def is_run_commit(kind: str | None, commit_run: str | None, run_id: str | None = None,
                  kinds: frozenset[str] = RUN_KINDS) -> bool:
    """A commit of kind `kind` naming run `commit_run` (its trailers) is one of run
    `run_id`'s commits (of any run when None), of `kinds`."""
    return bool(commit_run) and kind in kinds and (run_id is None or commit_run == run_id)


def holds_record(commit: pygit2.Commit, record_path: str) -> bool:
    """`commit` holds the run record at `record_path` (not `in tree`: it leaks the path)."""
    return lookup.at_path(commit.tree, record_path) is not None


def begins_run(commit: pygit2.Commit, record_path: str | None) -> bool:
    """`commit` is its run's first: the one that adds the run's record (its first parent
    does not hold it). A root commit, or a run whose record is not found, begins there."""
    if not commit.parents or record_path is None:
        return True
    return not holds_record(commit.parents[0], record_path)
