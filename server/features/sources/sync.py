"""Update from source (issue 13, DESIGN §4 "Import and export"): when the folder or
repository a session came from has moved on, bring its changes in as one `user-edit` commit,
three-way: base = the source's files as last brought in (`refs/braid/source-base`), ours =
the session's workdir, theirs = the source now. Files changed on both sides that git cannot
merge keep the session's side and are listed as conflicts; nothing is lost (the source's
version is still in the source; a source's file or folder where the session has the other is
set aside as `path~source`).

Under kill -9 the update is one commit or nothing: an intent record (journal.py) names the
paths it writes, so start-up rolls `workdir/` back to HEAD when the commit was not made, or
in line with it when it was. `refs/braid/source-base` moves after the commit; a kill in
between leaves it behind, and the next update (same base, the changes already on both
sides) merges cleanly and moves it."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pygit2

from server.agent.turn_context import snapshot_user_edits
from server.base import crash, events
from server.base.errors import BadRequest, Busy
from server.base.records import SessionMeta, to_json_bytes
from server.base.results import PathConflict, SyncResult
from server.features.roots import Roots, roots_of
from server.features.sources.importing import SOURCE_BASE_REF, set_source_base, take_snapshot
from server.features.sources.sources import Source, allowed_path
from server.git import lookup
from server.git.merge3 import Clash, Side, merge
from server.git.session import GitSession
from server.git.trees import empty_tree, tree_changes
from server.git.workdir.scan import WORKDIR, workdir_tree
from server.store import journal

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.base.settings import Settings


def _merged(repo: pygit2.Repository, base: pygit2.Tree, ours: pygit2.Tree,
            theirs: pygit2.Tree) -> tuple[pygit2.Tree, list[PathConflict]]:
    """The source's changes merged into the session's files (git/merge3.py): a clash keeps
    the session's side and is listed; a file against a folder keeps both, the source's side
    set aside as `path~source`."""
    merged = merge(repo, base, ours, theirs, renames=True, labels=("session", "source"))
    conflicts: list[PathConflict] = []
    for clash in merged.open():
        conflicts.append({"path": clash.path, "ours": _state(clash, "ours"),
                          "theirs": _state(clash, "theirs")})
        merged.take(clash, "ours")
    return lookup.tree_at(repo, merged.tree()), conflicts


def _state(clash: Clash, side: Side) -> str:
    if clash.folder_side == side:
        return "folder"
    return "deleted" if clash.entry(side) is None else "modified"


def sync_from_source(git: GitSession, settings: Settings, roots: Roots, meta: SessionMeta
                     ) -> tuple[SyncResult, SessionMeta | None]:
    """Merge the source's files as they are now into the branch shown. Returns what it did,
    and the new session.json when it committed one."""
    raw = meta.get("source")
    if not raw:
        raise BadRequest("this session was not imported: it has no source to update from")
    source = Source.from_meta(raw)
    if source.local is not None:  # the caller's roots now, not the importer's then
        allowed_path(roots, str(source.local))
    repo = git.repo
    snap = take_snapshot(repo, source, settings, roots)  # TooLarge here: nothing written yet
    crash.at("update.after_snapshot")
    theirs = lookup.tree_at(repo, snap.tree) if snap.tree is not None else empty_tree(repo)
    at_base = lookup.ref_commit(repo, SOURCE_BASE_REF)
    base = at_base.tree if at_base is not None else empty_tree(repo)
    result: SyncResult = {"changed": False, "updated_paths": [], "conflicts": [],
                          "commit_id": None, "base_commit": snap.base_commit,
                          "skipped": snap.skipped[:200]}
    if theirs.id == base.id:
        return result, None
    snapshot_user_edits(git)
    ours = workdir_tree(git.head_commit()) or empty_tree(repo)
    merged, conflicts = _merged(repo, base, ours, theirs)
    changes: dict[str, bytes | None] = {}
    for rel, entry in tree_changes(ours, merged).items():
        changes[f"{WORKDIR}/{rel}"] = (lookup.blob_data(repo, entry[0]) if entry is not None
                                       else None)
    if not changes and not conflicts:
        # The source moved, but only to what the session holds already (the same edit made
        # on both sides, or a retry after a kill between the commit and the base's move):
        # nothing to bring in, so no commit; the base moves on, outside the history.
        set_source_base(repo, snap.tree, f"Source files at update ({source.path_or_url})")
        return result, None
    new_meta = cast(SessionMeta, dict(git.read_json(git.head_commit(), "session.json")))
    new_meta["source"] = source.meta(snap.base_commit)
    changes["session.json"] = to_json_bytes(new_meta)
    where = f" at {snap.base_commit[:10]}" if snap.base_commit else ""
    with journal.intent(git, "update", changes, kind="user-edit"):
        oid = git.write_checkpoint(changes, summary=f"Update from source{where}",
                                   kind="user-edit")
        set_source_base(repo, snap.tree, f"Source files at update ({source.path_or_url})")
        crash.at("update.after_commit")
    result.update({"changed": True, "commit_id": str(oid), "conflicts": conflicts,
                   "updated_paths": sorted(p[len(WORKDIR) + 1:] for p in changes
                                           if p.startswith(f"{WORKDIR}/"))})
    return result, new_meta


async def update_from_source(braid: Services, user_id: str, session_id: str) -> SyncResult:
    handle = braid.store.get_owned(user_id, session_id)
    if await braid.locks.held(handle.session_id):
        raise Busy("a run is going on in this session: update when it ends")
    meta = handle.meta.copy()
    roots = await roots_of(braid, user_id)
    result, new_meta = await handle.call(
        lambda git: sync_from_source(git, braid.settings, roots, meta))
    if new_meta is not None:
        handle.meta["source"] = new_meta["source"]
        braid.bus.publish(handle.session_id, events.session_changed(
            await handle.call(lambda git: git.branch), str(result["commit_id"])))
    return result
