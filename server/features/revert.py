"""Revert a turn, and undo the revert (DESIGN §4 "Revert a turn").

A revert is a new `revert` commit; an unrevert a new `unrevert` commit: nothing is destroyed.
Both work three-way, like `git revert`: for each file the turn changed, base = the file after
the turn, ours = the file now, theirs = the file before the turn. A file nobody touched since
simply goes back; a file later turns (or the user) also changed keeps their work when the
hunks do not overlap; overlapping hunks refuse the whole revert with `Conflict` and the list of
conflicts, changing nothing, unless `force` puts the pre-turn content back for those files.
An unrevert is the same operation applied to the revert commit.

The commit also marks the run record (`reverted`, when, which files) so the page and a reindex
read the state from git, and adds a system message to the branch's history, so the next model
call knows its old edits no longer stand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, cast

import pygit2

from server.agent.turn_changes import (
    FileChange,
    TurnSpan,
    changes_of,
    child_of,
    files_of,
    trailers_of,
    turn_spans,
    unified_diff,
)
from server.agent.turn_context import snapshot_user_edits
from server.base import crash, events
from server.base.errors import BadRequest, Conflict, ErrorDetails, NotFound
from server.base.ids import new_message_id, now_iso
from server.base.records import FileChip, MessageRecord, RunRecord, to_json_bytes
from server.base.results import Conflicted, RevertResult, TurnDiff, TurnFiles
from server.git import lookup, merge3
from server.git.commits import first_parent_line
from server.git.session import Change, GitSession
from server.git.trees import Entry, apply_changes, empty_tree, file_at
from server.git.workdir.scan import WORKDIR
from server.git.workdir.staging import DISK
from server.store import journal, layout
from server.store.backups import check_writable, write_entry
from server.store.locks import hold_shown, on_branch

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.store.session_store import SessionHandle

CONTENT_LIMIT = 20_000
NAMES_IN_NOTE = 20


# -- finding the turn ---------------------------------------------------------------------


def resolve_turn(git: GitSession, turn_id: str,
                 commit: pygit2.Commit) -> tuple[str, str, RunRecord]:
    """(run_id, run record path, run record) of a turn on the branch at `commit`. Any of the
    turn's assistant message ids is accepted too (the protocol's `assistant_msg_id`)."""
    record_path = layout.find_run_path(git, turn_id, commit)
    run_id = turn_id
    if record_path is None:
        owner = next((m.get("run_id") for m in layout.messages(git, commit)
                      if m.get("id") == turn_id and m.get("role") == "assistant"), None)
        if owner:
            run_id = str(owner)
            record_path = layout.find_run_path(git, run_id, commit)
    if record_path is None:
        raise NotFound(f"no turn {turn_id} on branch {git.branch}")
    return run_id, record_path, git.read_json(commit, record_path).copy()


def _turn_changes(git: GitSession, run_id: str, commit: pygit2.Commit) -> list[FileChange]:
    span = turn_spans(git, commit, [run_id]).get(run_id)
    return changes_of(git, span) if span is not None else []


def reverted_files(record: Mapping[str, object], paths: Iterable[str]) -> set[str]:
    """Which of the turn's files stand reverted: the record's `reverted_files` (a per-file
    revert keeps it), else all of them for a record reverted whole before it existed."""
    listed = record.get("reverted_files")
    if isinstance(listed, list):
        return set(paths) & {str(p) for p in listed}
    return set(paths) if record.get("reverted") else set()


def _chosen(run_id: str, changes: list[FileChange], paths: list[str] | None
            ) -> list[FileChange]:
    """The changes of the files named (all when None); a file the turn did not change is a
    bad request."""
    if paths is None:
        return changes
    by_path = {c.path: c for c in changes}
    unknown = [p for p in paths if p not in by_path]
    if unknown:
        raise BadRequest(f"turn {run_id} did not change {_names(unknown)}",
                         {"paths": list(unknown), "turn_id": run_id})
    return [by_path[p] for p in sorted(set(paths))]


# -- three-way ----------------------------------------------------------------------------


def three_way(git: GitSession, base: dict[str, Entry | None], ours: dict[str, Entry | None],
              theirs: dict[str, Entry | None]) -> tuple[dict[str, Entry | None], list[str]]:
    """Apply base→theirs onto ours per path (git/merge3.py for the paths changed on both
    sides). Returns (the paths whose content changes, with
    their new entry; the paths whose hunks conflict)."""
    result: dict[str, Entry | None] = {}
    merge: list[str] = []
    for path in sorted(base):
        b, o, t = base[path], ours.get(path), theirs.get(path)
        if o == t or b == t:
            continue  # already as wanted, or nothing to take out
        if o == b:
            result[path] = t  # untouched since: simply put it back
        else:
            merge.append(path)
    if not merge:
        return result, []
    # Paths, not renames: a turn's files are known by name.
    merged = merge3.merge(git.repo, _tree_of(git.repo, {p: base[p] for p in merge}),
                          _tree_of(git.repo, {p: ours.get(p) for p in merge}),
                          _tree_of(git.repo, {p: theirs.get(p) for p in merge}))
    conflicted = {c.path for c in merged.conflicts}
    conflicts = []
    for path in merge:
        if path in conflicted:
            conflicts.append(path)
        elif (entry := merged.entry(path)) != ours.get(path):
            result[path] = entry
    return result, conflicts


def _tree_of(repo: pygit2.Repository, entries: dict[str, Entry | None]) -> pygit2.Tree:
    tree = apply_changes(repo, None, {p: e for p, e in entries.items() if e is not None})
    return tree if tree is not None else empty_tree(repo)


def _text(git: GitSession, entry: Entry | None) -> str | None:
    if entry is None:
        return None
    data = lookup.blob_data(git.repo, entry[0])
    if b"\0" in data[:8000]:
        return f"(binary, {len(data)} bytes)"
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "\n… (truncated)"


def _conflict_details(git: GitSession, paths: list[str], ours: dict[str, Entry | None],
                      theirs: dict[str, Entry | None]) -> list[Conflicted]:
    return [{"path": p, "ours": _text(git, ours.get(p)), "theirs": _text(git, theirs.get(p))}
            for p in paths]


# -- revert and unrevert on the session thread --------------------------------------------


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:NAMES_IN_NOTE])
    more = len(paths) - NAMES_IN_NOTE
    return f"{shown} and {more} more" if more > 0 else shown


def _take_out(git: GitSession, head: pygit2.Commit, run_id: str, changes: list[FileChange],
              force: bool, refusal: str, paths: list[str] | None = None
              ) -> tuple[dict[str, Entry | None], list[Conflicted]]:
    """Three-way: take each change (before → after) back out of HEAD. Returns the new entries
    of the paths that change and the conflicts (forced to `before`, else `Conflict`)."""
    base = {c.path: c.after for c in changes}
    theirs = {c.path: c.before for c in changes}
    ours = {c.path: file_at(head.tree, f"{WORKDIR}/{c.path}") for c in changes}
    result, conflicts = three_way(git, base, ours, theirs)
    details = _conflict_details(git, conflicts, ours, theirs)
    if conflicts and not force:
        where: ErrorDetails = {"conflicts": details, "turn_id": run_id}
        if paths is not None:
            where["paths"] = sorted(set(paths))  # a per-file revert's: forcing names them
        raise Conflict(f"{refusal} in {_names(conflicts)}; nothing was changed", where)
    for path in conflicts:
        result[path] = theirs[path]
    return result, details


def _turn_state(git: GitSession, turn_id: str
                ) -> tuple[str, str, RunRecord, list[FileChange], set[str]]:
    """(run_id, record path, record, the turn's changes, the paths standing reverted)."""
    head = git.head_commit()
    run_id, record_path, record = resolve_turn(git, turn_id, head)
    changes = _turn_changes(git, run_id, head)
    return run_id, record_path, record, changes, reverted_files(record, (c.path for c in changes))


def _state_conflict(run_id: str, paths: list[str] | None, state: str) -> Conflict:
    what = f"turn {run_id}" if paths is None else f"{_names(paths)} of turn {run_id}"
    verb = "is" if paths is None or len(paths) == 1 else "are"
    return Conflict(f"{what} {verb} {state}", {"conflicts": [], "turn_id": run_id})


def do_revert(git: GitSession, turn_id: str, force: bool,
              paths: list[str] | None = None) -> RevertResult:
    """Revert the turn's files (those named in `paths`, else all that do not stand reverted
    yet) as one `revert` commit."""
    run_id, record_path, record, changes, done = _turn_state(git, turn_id)
    if not changes:
        raise Conflict(f"turn {run_id} changed no files: nothing to revert",
                       {"conflicts": [], "turn_id": run_id})
    chosen = _chosen(run_id, changes, paths)
    todo = [c for c in chosen if c.path not in done]
    if not todo or (paths is not None and len(todo) < len(chosen)):
        again = [c.path for c in chosen if c.path in done] if paths is not None else None
        raise _state_conflict(run_id, again, "already reverted")
    # The user's edits are later work: committed first, never clobbered.
    snapshot_user_edits(git)
    head = git.head_commit()
    result, conflicts = _take_out(git, head, run_id, todo, force,
                                  f"later changes overlap turn {run_id}'s changes", paths)
    now_done = done | {c.path for c in todo}
    whole = now_done == {c.path for c in changes}
    names = _names([c.path for c in todo])
    if whole and not done:
        note = f"Turn {run_id} was reverted; its changes to {names} were undone."
    else:
        standing = [c.path for c in changes if c.path not in now_done]
        note = f"Turn {run_id}'s changes to {names} were reverted" + (
            f"; its changes to {_names(standing)} still stand." if standing else
            "; none of its changes stand now.")
    if conflicts:
        forced = _names([c["path"] for c in conflicts])
        note += f" Later edits to {forced} were replaced by the pre-turn content."
    record.update({"reverted": whole, "reverted_files": sorted(now_done),
                   "reverted_at": now_iso(), "revert_forced": bool(conflicts),
                   "reverted_paths": sorted(result)})
    out = _commit(git, run_id, record_path, record, result, "revert", note)
    out["conflicts"], out["files"] = conflicts, [c.as_dict() for c in changes]
    return out


def _reverting_commits(git: GitSession, head: pygit2.Commit, run_id: str, record_path: str,
                       paths: set[str], all_paths: set[str]) -> dict[str, pygit2.Commit]:
    """For each path, the newest `revert` commit of the turn that reverted it (the one an
    unrevert of that path undoes)."""
    found: dict[str, pygit2.Commit] = {}
    for commit in first_parent_line(head):
        if len(found) == len(paths):
            break
        if trailers_of(commit) != ("revert", run_id) or not commit.parents:
            continue
        after = reverted_files(git.read_json(commit, record_path), all_paths)
        try:
            before = reverted_files(git.read_json(commit.parents[0], record_path), all_paths)
        except NotFound:  # the record came later (a commit before the turn's own)
            before = set()
        for path in (after - before) & paths:
            found.setdefault(path, commit)
    return found


def do_unrevert(git: GitSession, turn_id: str, force: bool,
                paths: list[str] | None = None) -> RevertResult:
    """Re-apply the turn's reverted files (those named in `paths`, else all): each file's
    revert commit taken back out, three-way, as one `unrevert` commit."""
    try:
        run_id, record_path, record, changes, done = _turn_state(git, turn_id)
    except NotFound:
        if paths is None and (undo := undo_rewind(git, turn_id, force)) is not None:
            return undo
        raise
    chosen = _chosen(run_id, changes, paths)
    todo = [c.path for c in chosen if c.path in done]
    if not todo or (paths is not None and len(todo) < len(chosen)):
        standing = [c.path for c in chosen if c.path not in done] if paths is not None else None
        raise _state_conflict(run_id, standing, "not reverted")
    snapshot_user_edits(git)
    head = git.head_commit()
    commits = _reverting_commits(git, head, run_id, record_path, set(todo),
                                 {c.path for c in changes})
    if not commits:
        raise NotFound(f"the revert of turn {run_id} is not on branch {git.branch}")
    # Undoing a revert = taking the revert commit's own change back out, file by file.
    undone: list[FileChange] = []
    for commit in {c.id: c for c in commits.values()}.values():
        mine = {p for p, c in commits.items() if c.id == commit.id}
        undone += [u for u in changes_of(git, TurnSpan(run_id, commit, commit), backups={})
                   if u.path in mine]
    result, conflicts = _take_out(git, head, run_id, undone, force,
                                  f"later changes overlap the revert of turn {run_id}", paths)
    left = done - set(todo)
    if left:
        note = f"Turn {run_id}'s changes to {_names(todo)} are back; its changes to " \
            f"{_names(sorted(left))} stay reverted."
    else:
        note = f"The revert of turn {run_id} was undone; its changes to " \
            f"{_names(todo)} are back."  # the files that were reverted, not every file
    newest = max(commits.values(), key=lambda c: c.commit_time)
    record.update({"reverted": False, "reverted_files": sorted(left),
                   "unreverted_at": now_iso(), "undone_revert_commit_id": str(newest.id)})
    out = _commit(git, run_id, record_path, record, result, "unrevert", note)
    out["conflicts"], out["files"] = conflicts, [c.as_dict() for c in changes]
    return out


def undo_rewind(git: GitSession, rewind_id: str, force: bool) -> RevertResult | None:
    """Undo a files-only rewind (timetravel.rewind_files), named by its note's id: its
    `revert` commit taken back out as an `unrevert` commit. None: no such rewind."""
    head = git.head_commit()
    note = next((m for m in layout.messages(git, head)
                 if m.get("id") == rewind_id and m.get("kind") == "rewind"), None)
    if note is None:
        return None
    for commit in first_parent_line(head):
        kind, run = trailers_of(commit)
        if run != rewind_id:
            continue
        if kind != "revert" or not commit.parents:
            raise _state_conflict(rewind_id, None, "undone already")
        break
    else:
        return None
    snapshot_user_edits(git)
    head = git.head_commit()
    undone = changes_of(git, TurnSpan(rewind_id, commit, commit), backups={})
    result, conflicts = _take_out(git, head, rewind_id, undone, force,
                                  "later changes overlap the rewind")
    point = note.get("rewound_to")
    which = f" to run {point['run_id']}" if point else ""
    text = f"The files-only rewind{which} was undone; " + (
        f"{_names(sorted(result))} are back as they were before it." if result
        else "no file needed changing.")
    # The summary names the run rewound to (the page reads it as "turn N"), not the rewind's
    # own id, which names no turn.
    out = commit_files(git, rewind_id, {}, result, "unrevert", text,
                       {"reverted_run_id": rewind_id, "kind": "unrevert"},
                       summary=f"Undo the files rewind{which[:18]}: "
                               f"{_names(sorted(result)) or 'no file changed'}")
    out["conflicts"] = conflicts
    if "rewound_to" in note:
        out["rewind"] = note["rewound_to"]
    return out


def _commit(git: GitSession, run_id: str, record_path: str, record: RunRecord,
            result: dict[str, Entry | None], kind: str, note_text: str) -> RevertResult:
    out = commit_files(git, run_id, {record_path: to_json_bytes(record)}, result, kind,
                       note_text, {"reverted_run_id": run_id, "kind": kind})
    out["run"] = record
    return out


def standing_rewinds(messages: Iterable[MessageRecord]) -> dict[str, str]:
    """{message id: rewind id} of the files-only rewinds among `messages` (a branch's, in
    order) that no later note undid: the user bubbles that show "Files rewound here"."""
    out: dict[str, str] = {}
    for msg in messages:
        if msg.get("role") != "system":
            continue
        point = msg.get("rewound_to")
        if msg.get("kind") == "rewind" and point and point.get("message_id"):
            out[str(point["message_id"])] = msg["id"]
        elif msg.get("kind") == "unrevert" and msg.get("reverted_run_id") in out.values():
            out = {k: v for k, v in out.items() if v != msg.get("reverted_run_id")}
    return out


def commit_files(git: GitSession, run_id: str, extra: dict[str, Change],
                 result: dict[str, Entry | None], kind: str, note_text: str,
                 note_fields: Mapping[str, object], point: str | None = None,
                 summary: str | None = None) -> RevertResult:
    """Write `result` (workdir path → entry, None: delete) and commit it with `extra`
    (repo paths) and a system note, journaled: all or nothing under kill -9. `run_id` is the
    commit's `Braid-Run`; the note's id is `note_fields["id"]` when given."""
    deleting = frozenset(p for p, e in result.items() if e is None)
    for path, entry in result.items():
        check_writable(git, path, entry, deleting)  # all before any: a refusal changes nothing
    # run_id null: the note belongs to no run, so it never shifts a run's message indexes.
    note = cast(MessageRecord, {"id": new_message_id(), "role": "system", "content": note_text,
                                "run_id": None, "created_at": now_iso(), **note_fields})
    # The files are on disk already, with their modes: stage them from there.
    changes: dict[str, Change] = {f"{WORKDIR}/{p}": DISK if e is not None else None
                                  for p, e in result.items()}
    changes.update(extra)
    changes[layout.next_message_path(git, "system", note["id"])] = to_json_bytes(note)
    verb = "Revert" if kind == "revert" else "Redo"
    summary = summary or f"{verb} turn {run_id[:10]}: {_names(sorted(result)) or 'no file changed'}"
    # All or nothing under kill -9: the intent names every path before the first write.
    with journal.intent(git, kind, changes):
        # Deletions first, so a file can replace a folder the revert empties (and back).
        for path, entry in sorted(result.items(), key=lambda item: item[1] is not None):
            write_entry(git, path, entry)
        crash.at(point or f"{kind}.after_files")
        commit_id = git.write_checkpoint(changes, summary=summary, kind=kind, run_id=run_id)
    return {"turn_id": run_id, "run_id": run_id, "commit_id": str(commit_id),
            "restored_paths": sorted(result), "reverted": kind == "revert", "note": note}


# -- the core calls the transports make ---------------------------------------------------


async def list_turn_files(braid: Services, user_id: str, session_id: str,
                          turn_id: str) -> TurnFiles:
    handle = braid.store.get_owned(user_id, session_id)
    tid = turn_id

    def work(git: GitSession) -> TurnFiles:
        head = git.head_commit()
        run_id, _, record = resolve_turn(git, tid, head)
        paths = [c.as_dict() for c in _turn_changes(git, run_id, head)]
        done = reverted_files(record, (p["path"] for p in paths))
        return {"turn_id": run_id, "paths": paths, "reverted": bool(record.get("reverted")),
                "reverted_files": sorted(done)}

    return await handle.call(work)


async def turn_diff(braid: Services, user_id: str, session_id: str, turn_id: str,
                    path: str | None = None) -> TurnDiff:
    handle = braid.store.get_owned(user_id, session_id)
    tid, wanted = turn_id, path

    def work(git: GitSession) -> TurnDiff:
        head = git.head_commit()
        run_id, _, record = resolve_turn(git, tid, head)
        child = child_of(record)
        if child is not None and child.get("branch") in git.branches():
            # A sub-agent's result: the diff is its child's, on the child's branch.
            tip = git.commit(git.branch_tip(str(child["branch"])))
            changes = _turn_changes(git, str(child["run_id"]), tip)
        else:
            changes = _turn_changes(git, run_id, head)
        if wanted is not None:
            changes = [c for c in changes if c.path == wanted]
            if not changes:
                raise NotFound(f"turn {run_id} did not change {wanted}")
        return {"turn_id": run_id, "path": wanted, "diff": unified_diff(git, changes),
                "paths": [c.as_dict() for c in changes]}

    return await handle.call(work)


async def revert_turn(braid: Services, user_id: str, session_id: str, turn_id: str,
                      force: bool = False, paths: list[str] | None = None) -> RevertResult:
    """Revert a turn, or only the files of it named in `paths`."""
    handle = braid.store.get_owned(user_id, session_id)
    return await exclusive(braid, handle, lambda git: do_revert(git, turn_id, force, paths))


async def unrevert_turn(braid: Services, user_id: str, session_id: str, turn_id: str,
                        force: bool = False, paths: list[str] | None = None) -> RevertResult:
    """Redo a reverted turn (or only the files named in `paths`), or undo a files-only
    rewind named by the `turn_id` `rewind_files` returned."""
    handle = braid.store.get_owned(user_id, session_id)
    return await exclusive(braid, handle, lambda git: do_unrevert(git, turn_id, force, paths))


async def exclusive(braid: Services, handle: SessionHandle,
                     work: Callable[[GitSession], RevertResult]) -> RevertResult:
    """Run a revert or unrevert holding the branch like a turn does: refused (`Busy`) while a
    run is live on it, and no turn can start in the middle."""
    async with hold_shown(braid.locks, handle) as branch:
        result = await handle.call(on_branch(branch, work))
    sid = handle.session_id
    braid.bus.publish(sid, events.checkpoint(result["run_id"], result["commit_id"],
                                             "revert" if result["reverted"] else "unrevert"))
    braid.bus.publish(sid, events.reverted(
        {"turn_id": result["turn_id"], "run_id": result["run_id"],
         "commit_id": result["commit_id"], "restored_paths": result["restored_paths"],
         "conflicts": result.get("conflicts") or [], "reverted": result["reverted"],
         "note": result["note"], "files": result.get("files") or [], "branch": branch},
        run=result.get("run"), rewind=result.get("rewind")))
    braid.bus.publish(sid, events.dag_changed(run_id=result["run_id"]))
    return result


async def files_of_run(braid: Services, user_id: str, session_id: str, run_id: str,
                       branch: str | None = None) -> list[FileChip]:
    """The chips of one turn, on `branch` (default: the branch shown): for a bubble that was
    just rendered from a live event rather than from the transcript."""
    handle = braid.store.get_owned(user_id, session_id)
    return await handle.call(lambda git: files_of(git, run_id, branch))
