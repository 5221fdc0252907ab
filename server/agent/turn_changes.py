"""What a turn changed in `workdir/`: its span of commits on a branch, each file's content
before and after it, and the views the page and the API show (status chips, diffs).

A turn's commits are its run's commits of `layout.TURN_KINDS` (the one definition of a run's
commits is layout.py's). Walking the branch's first parents from its tip finds them; the turn
began at the first of them, the one that adds the turn's run record (`layout.begins_run`).
Before = the file as the `BackupStore` recorded it before the turn's first edit, else as the
commit before the turn held it (changes made some other way are caught by the checkpoints).
After = the turn's last checkpoint.

Everything here reads git only, on the session's worker thread.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import pygit2

from server.base.records import FileChip, SubAgentInfo
from server.base.results import TranscriptItem
from server.git import lookup
from server.git.commits import TRAILER_KIND, TRAILER_RUN, first_parent_line, parse_trailers
from server.git.session import GitSession
from server.git.trees import Entry, file_at, tree_delta
from server.git.workdir.scan import workdir_tree
from server.store import layout
from server.store.backups import BackupStore

MAX_DIFF_BYTES = 400_000


@dataclass
class TurnSpan:
    """A turn's first and last checkpoint on one branch's first-parent line."""

    run_id: str
    first: pygit2.Commit
    last: pygit2.Commit
    complete: bool = False  # the walk reached the commit that began the turn

    @property
    def before(self) -> pygit2.Commit | None:
        return self.first.parents[0] if self.first.parents else None


@dataclass(frozen=True)
class FileChange:
    path: str
    before: Entry | None
    after: Entry | None

    @property
    def status(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "deleted"
        return "modified"

    def as_dict(self) -> FileChip:
        return {"path": self.path, "status": self.status}


def trailers_of(commit: pygit2.Commit) -> tuple[str | None, str | None]:
    trailers = parse_trailers(commit.message)
    return trailers.get(TRAILER_KIND), trailers.get(TRAILER_RUN)


CHANGES_KEPT = 2000  # turns' changes kept with an open session (a few paths each)


def turn_spans(git: GitSession, tip: pygit2.Commit,
               run_ids: Iterable[str] | None = None) -> dict[str, TurnSpan]:
    """The spans of the given runs (all runs when None) on `tip`'s first-parent line, in one
    walk that stops as soon as every wanted run's beginning has been passed."""
    wanted = set(run_ids) if run_ids is not None else None
    # A run's record keeps its path on a line (it is placed by the run's ordinal), so it is
    # looked up in the tip's listing, which the page has just read; only a run whose record
    # the tip no longer holds (a fork took its source run out) is looked up where it ends.
    record_paths: dict[str, str | None] = {}
    # Whether a commit begins its run is fixed by the commit: kept with the open session, so
    # a page drawn again looks up no record in the trees of turns it has drawn (issue 30).
    begins: dict[tuple[pygit2.Oid, str | None], bool] = git.caches.setdefault("begins_run", {})
    if len(begins) > 10 * CHANGES_KEPT:
        begins.clear()
    spans: dict[str, TurnSpan] = {}
    open_count = len(wanted) if wanted is not None else -1
    for commit in first_parent_line(tip):
        kind, run_id = trailers_of(commit)
        if not layout.is_run_commit(kind, run_id, kinds=layout.TURN_KINDS):
            continue
        assert run_id is not None  # a run's commit names it
        if wanted is not None and run_id not in wanted:
            continue
        span = spans.get(run_id)
        if span is None:
            span = spans[run_id] = TurnSpan(run_id, commit, commit)
            record_paths[run_id] = (layout.find_run_path(git, run_id, tip)
                                    or layout.find_run_path(git, run_id, commit))
        elif span.complete:
            continue  # an older span of a run resumed in place; the newer one began later
        span.first = commit
        key = (commit.id, record_paths[run_id])
        begun = begins.get(key)
        if begun is None:
            begun = begins[key] = layout.begins_run(commit, key[1])
        if begun:
            span.complete = True
            open_count -= 1
            if open_count == 0:
                break
    return spans


def changes_of(git: GitSession, span: TurnSpan,
               backups: dict[str, Entry | None] | None = None) -> list[FileChange]:
    """Every workdir file the turn changed, sorted by path, with its content before and after."""
    before_tree = workdir_tree(span.before)
    after_tree = workdir_tree(span.last)
    before: dict[str, Entry | None] = {}
    after: dict[str, Entry | None] = {}
    # Only the folders on changed paths are read (treeops.tree_delta), not 100,000 files.
    for path, old, new in tree_delta(before_tree, after_tree):
        before[path] = old
        after[path] = new
    if backups is None:
        backups = BackupStore(git).manifest(span.run_id)
    for rel, entry in backups.items():
        before[rel] = entry
        if rel not in after:
            after[rel] = file_at(after_tree, rel)
    out = []
    for rel in sorted(before.keys() | after.keys()):
        b, a = before.get(rel), after.get(rel)
        if b != a:
            out.append(FileChange(rel, b, a))
    return out


def file_views(git: GitSession, tip: pygit2.Commit, run_ids: Iterable[str],
               settled: Collection[str] = ()) -> dict[str, list[FileChip]]:
    """`[{path, status}]` per run, for many runs in one walk of the branch. A settled run's
    (one not going on) are kept by its span's first and last commits, which fix them: the
    page drawn again reads only the turns it has not drawn (issue 30)."""
    kept: dict[tuple[str, pygit2.Oid, pygit2.Oid], list[FileChange]] = \
        git.caches.setdefault("turn_changes", {})
    if len(kept) > CHANGES_KEPT:
        kept.clear()
    out: dict[str, list[FileChip]] = {}
    for run_id, span in turn_spans(git, tip, run_ids).items():
        key = (run_id, span.first.id, span.last.id)
        changes = kept.get(key)
        if changes is None:
            changes = changes_of(git, span)
            if run_id in settled:
                kept[key] = changes
        out[run_id] = [c.as_dict() for c in changes]
    return out


def files_of(git: GitSession, run_id: str, branch: str | None = None) -> list[FileChip]:
    """The chips of one turn, on `branch` (default, or when gone: the branch shown)."""
    tip = git.head_commit()
    if branch and branch != git.branch and branch in git.branches():
        tip = git.commit(git.branch_tip(branch))
    return file_views(git, tip, [run_id]).get(run_id, [])


def child_of(run: Mapping[str, object]) -> SubAgentInfo | None:
    """For a sub-agent's result run (`kind: sub-agent-result`), its child: {branch, run_id,
    files...}; else None."""
    sub = run.get("sub_agent")
    if run.get("kind") != "sub-agent-result" or not isinstance(sub, dict):
        return None
    return cast(SubAgentInfo, sub)


def annotate_turns(git: GitSession, commit: pygit2.Commit, items: list[TranscriptItem]) -> None:
    """Give every turn of a transcript its `files`, computed for all of them in one pass."""
    run_ids = [rid for t in items if t.get("type") == "turn" and (rid := t.get("run_id"))]
    if not run_ids:
        return
    settled = {t.get("run_id") for t in items if t.get("type") == "turn" and
               (t.get("run") or {}).get("status") not in (None, "RUNNING", "PENDING")}
    views = file_views(git, commit, run_ids, {r for r in settled if r})
    for item in items:
        if item.get("type") == "turn":
            # A sub-agent's result changed nothing here: its chips are the child's files.
            child = child_of(item.get("run") or {})
            item["files"] = views.get(item.get("run_id") or "", []) or \
                list((child or {}).get("files") or [])


def unified_diff(git: GitSession, changes: list[FileChange]) -> str:
    """One git-style unified diff of the changes (binary files say so)."""
    parts: list[str] = []
    total = 0
    for change in changes:
        old = lookup.blob_data(git.repo, change.before[0]) if change.before else None
        new = lookup.blob_data(git.repo, change.after[0]) if change.after else None
        # Bytes, not Blob objects: pygit2 reads freed memory for a temporary Blob.
        patch = pygit2.Patch.create_from(old, new, old_as_path=change.path,
                                         new_as_path=change.path)
        text = patch.text or f"diff --git a/{change.path} b/{change.path}\n"
        if change.before and change.after and change.before[1] != change.after[1]:
            # Patches made from bytes know no modes: say the executable bit or link changed.
            head, _, rest = text.partition("\n")
            modes = f"old mode {change.before[1]:o}\nnew mode {change.after[1]:o}\n"
            text = f"{head}\n{modes}{rest}"
        total += len(text)
        if total > MAX_DIFF_BYTES:
            parts.append(f"… diff truncated: more than {MAX_DIFF_BYTES} bytes\n")
            break
        parts.append(text)
    return "".join(parts)
