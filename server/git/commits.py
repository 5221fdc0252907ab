"""Checkpoint commits as Braid writes and reads them: a summary line, a blank line, the names
left out (`skipped`, when there are any) as a paragraph of JSON lines, then the
trailers `Braid-Kind`, `Braid-Run`, `Braid-Message-Index` (DESIGN §3), and `CommitInfo`,
the view of one such commit (DESIGN §2 ContextCommit)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pygit2

from server.base import names
from server.base.records import Skipped
from server.base.results import CommitNode

TRAILER_KIND = "Braid-Kind"
TRAILER_RUN = "Braid-Run"
TRAILER_INDEX = "Braid-Message-Index"
# The body paragraph that lists the names a commit left out (tests read it back).
SKIPPED_HEAD = "Left out, names git cannot hold"
SKIPPED_LISTED = 200
SUBJECT_CHARS = 200  # a commit subject's characters at most


@dataclass(frozen=True)
class CommitInfo:
    """The view of one checkpoint commit (DESIGN §2 ContextCommit)."""

    id: str
    parent_ids: list[str]
    kind: str
    run_id: str | None
    message_index: int | None
    summary: str
    created_at: int

    @property
    def parent_id(self) -> str | None:
        return self.parent_ids[0] if self.parent_ids else None

    def as_dict(self) -> CommitNode:
        return {
            "id": self.id,
            "parent_ids": self.parent_ids,
            "parent_id": self.parent_id,
            "kind": self.kind,
            "run_id": self.run_id,
            "message_index": self.message_index,
            "summary": self.summary,
            "created_at": self.created_at,
        }


def commit_message(summary: str, kind: str, run_id: str | None, message_index: int | None,
                   skipped: Sequence[Skipped] = ()) -> str:
    # The subject: one printable line (base/names.py's title rule), so no escape reaches `git log`.
    subject = names.plain_title(summary.splitlines()[0], SUBJECT_CHARS) if summary.strip() else ""
    lines = [subject or kind, ""]
    if skipped:  # names git cannot hold, left out (DESIGN §4 "Boundaries"): before the trailers
        lines.append(f"{SKIPPED_HEAD} ({len(skipped)}):")
        # One JSON object a line: a name's newline or "Braid-…: " never reads as a trailer.
        lines += ["  " + json.dumps(s, ensure_ascii=False) for s in skipped[:SKIPPED_LISTED]]
        if len(skipped) > SKIPPED_LISTED:
            lines.append(f"  ... and {len(skipped) - SKIPPED_LISTED} more")
        lines.append("")
    lines.append(f"{TRAILER_KIND}: {kind}")
    if run_id:
        lines.append(f"{TRAILER_RUN}: {run_id}")
    if message_index is not None:
        lines.append(f"{TRAILER_INDEX}: {message_index}")
    return "\n".join(lines) + "\n"




def parse_trailers(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Braid-"):
            out[key] = value.strip()
    return out


def commit_info(commit: pygit2.Commit) -> CommitInfo:
    trailers = parse_trailers(commit.message)
    index = trailers.get(TRAILER_INDEX)
    return CommitInfo(
        id=str(commit.id),
        parent_ids=[str(p) for p in commit.parent_ids],
        kind=trailers.get(TRAILER_KIND, "unknown"),
        run_id=trailers.get(TRAILER_RUN),
        message_index=int(index) if index and index.isdigit() else None,
        summary=commit.message.splitlines()[0] if commit.message else "",
        created_at=commit.commit_time,
    )


def first_parent_line(tip: pygit2.Commit) -> Iterator[pygit2.Commit]:
    """`tip` and its first parents, newest first: the line a branch's own history is read
    along (a merge's other parents are the merged branches' work)."""
    commit: pygit2.Commit | None = tip
    while commit is not None:
        yield commit
        commit = commit.parents[0] if commit.parents else None
