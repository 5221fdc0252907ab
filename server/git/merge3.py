"""The one three-way merge of trees: revert, merge and update from source all call `merge`;
merging branches (the user's merge, the model's `merge_branches`) plans with `plan_merge`.

`merge(repo, base, ours, theirs)` runs libgit2's tree merge (paths, not renames, unless asked)
and returns a `Merged`: the merged index and every conflict as a `Clash`, each side's entry
and, for a file on one side where the other has a folder, the folder's files. The caller
settles each open clash its own way (`take` a side, `put` its own bytes), then asks for the
`tree`, which refuses while a clash is open.

The file/folder rule is here once: a tree cannot hold `p` and `p/q`, so the side a caller
keeps takes the name and the other is set aside at `p~<its label>` (as git does). Neither is
ever dropped, and the clash is always reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pygit2
from pygit2.enums import FileMode, MergeFavor, MergeFlag

from server.base.errors import BadRequest
from server.base.results import Conflicted
from server.git import lookup
from server.git.branches import branch_words
from server.git.session import GitSession
from server.git.trees import Entry, empty_tree
from server.git.workdir.scan import workdir_tree

Side = Literal["ours", "theirs"]
NO_RENAMES = MergeFlag(0)  # each conflict is then about one path, on both sides
FAVOR = {"ours": MergeFavor.OURS, "theirs": MergeFavor.THEIRS}
STRATEGIES = ("fail", "ours", "theirs", "agent")  # what a merge of branches does on conflict
SIDE_CHARS = 20_000
FOLDER_NAMES = 5  # a folder side of a conflict shows this many of its files


class OpenConflicts(ValueError):
    """A merged tree was asked for while clashes were still open."""

    code = "conflict"


@dataclass(frozen=True)
class Clash:
    """One conflicted path: each side's entry (None: absent there) and, when one side has a
    folder where the other has a file, the folder's files in the merged tree."""

    path: str
    ancestor: pygit2.IndexEntry | None
    ours: pygit2.IndexEntry | None
    theirs: pygit2.IndexEntry | None
    folder: tuple[str, ...] = ()

    @property
    def folder_side(self) -> Side | None:
        """Which side has the folder, for a file/folder clash."""
        if not self.folder:
            return None
        return "ours" if self.ours is None else "theirs"

    def entry(self, side: Side) -> pygit2.IndexEntry | None:
        return self.ours if side == "ours" else self.theirs


@dataclass
class Merged:
    """A merge in progress: the index and its clashes (`conflicts`: every one found, for the
    report; `open()`: those still to settle)."""

    repo: pygit2.Repository
    index: pygit2.Index
    labels: tuple[str, str]  # (ours, theirs): what a set-aside path is suffixed with
    conflicts: list[Clash] = field(default_factory=list)

    def open(self) -> list[Clash]:
        return _clashes(self.index)

    def entry(self, path: str) -> Entry | None:
        """The merged file at `path` (None: absent, or still in conflict)."""
        if path not in self.index:
            return None
        found = self.index[path]
        return found.id, int(found.mode)

    def take(self, clash: Clash, side: Side) -> None:
        """Settle `clash` with `side`'s entry (its absence deletes the path). A file/folder
        clash keeps both: `side` keeps the name, the other side is set aside."""
        self._settle(clash)
        folder_side = self._folder_side(clash)
        if folder_side is not None:
            self._keep_both(clash, keep_folder=folder_side == side)
            return
        chosen = clash.entry(side)
        if chosen is None:
            if clash.path in self.index:
                self.index.remove(clash.path)
        else:
            self.index.add(pygit2.IndexEntry(clash.path, chosen.id, chosen.mode))

    def put(self, clash: Clash, data: bytes) -> None:
        """Settle `clash` with the caller's own bytes (a hand resolution, conflict markers):
        a regular file of the sides' mode (a symlink's becomes a file). A file/folder clash
        keeps both: the file with `data` keeps the name, the folder is set aside."""
        self._settle(clash)
        blob = self.repo.create_blob(data)
        if self._folder_side(clash) is not None:
            self._keep_both(clash, keep_folder=False, blob=blob)
            return
        mode = _file_mode(clash)
        self.index.add(pygit2.IndexEntry(clash.path, blob, mode))

    def tree(self) -> pygit2.Oid:
        """The merged tree, written. `OpenConflicts` while a clash is open."""
        left = self.open()
        if left:
            raise OpenConflicts(f"unsettled: {', '.join(c.path for c in left)}")
        return self.index.write_tree(self.repo)

    def _settle(self, clash: Clash) -> None:
        if self.index.conflicts is not None and clash.path in self.index.conflicts:
            del self.index.conflicts[clash.path]

    def _folder_side(self, clash: Clash) -> Side | None:
        # Read now, not from the clash: a favored re-merge's index is another index.
        if not _under(self.index, clash.path):
            return None
        return "ours" if clash.ours is None else "theirs"

    def _keep_both(self, clash: Clash, keep_folder: bool,
                   blob: pygit2.Oid | None = None) -> None:
        path = clash.path
        folder_side = self._folder_side(clash)
        file_side: Side = "theirs" if folder_side == "ours" else "ours"
        file_entry = clash.entry(file_side)
        assert file_entry is not None  # a file/folder clash has its file on one side
        if keep_folder:
            aside = f"{path}~{_plain(self._label(file_side))}"
            self.index.add(pygit2.IndexEntry(aside, file_entry.id, file_entry.mode))
            return
        aside = f"{path}~{_plain(self._label(folder_side or 'theirs'))}"
        for name in _under(self.index, path):
            moved = self.index[name]
            self.index.remove(name)
            self.index.add(pygit2.IndexEntry(aside + name[len(path):], moved.id, moved.mode))
        if blob is None:
            self.index.add(pygit2.IndexEntry(path, file_entry.id, file_entry.mode))
        else:
            self.index.add(pygit2.IndexEntry(path, blob, _file_mode(clash)))

    def _label(self, side: Side) -> str:
        return self.labels[0] if side == "ours" else self.labels[1]


def merge(repo: pygit2.Repository, base: pygit2.Oid | pygit2.Tree,
          ours: pygit2.Oid | pygit2.Tree, theirs: pygit2.Oid | pygit2.Tree, *,
          favor: Side | None = None, renames: bool = False,
          labels: tuple[str, str] = ("ours", "theirs")) -> Merged:
    """Merge base→theirs into ours. `conflicts` lists every clash of the plain merge; with
    `favor`, overlapping hunks then take that side (git's -X ours/theirs) and `open()` keeps
    only what that cannot settle (a deletion against an edit, a file against a folder)."""
    flags = MergeFlag.FIND_RENAMES if renames else NO_RENAMES
    index = repo.merge_trees(base, ours, theirs, flags=flags)
    found = _clashes(index)
    if found and favor is not None:
        index = repo.merge_trees(base, ours, theirs, favor=FAVOR[favor], flags=flags)
    return Merged(repo, index, labels, found)


def markers(repo: pygit2.Repository, clash: Clash, ours_label: str, theirs_label: str,
            limit: int) -> bytes:
    """The file with conflict markers, each side labelled (libgit2 labels both with the
    path); a side absent is marked deleted. `limit`: characters shown of a side written whole."""
    if clash.ours is not None and clash.theirs is not None:
        text = repo.merge_file_from_index(clash.ancestor, clash.ours, clash.theirs).contents
        lines = []
        for line in text.split("\n"):
            if line.startswith("<<<<<<< "):
                line = f"<<<<<<< {ours_label}"
            elif line.startswith(">>>>>>> "):
                line = f">>>>>>> {theirs_label}"
            lines.append(line)
        return "\n".join(lines).encode()
    mine, other = side_text(repo, clash.ours, limit) or "", \
        side_text(repo, clash.theirs, limit) or ""
    gone_ours = " (deleted)" if clash.ours is None else ""
    gone_theirs = " (deleted)" if clash.theirs is None else ""
    body = (f"<<<<<<< {ours_label}{gone_ours}\n{mine}{_nl(mine)}=======\n{other}{_nl(other)}"
            f">>>>>>> {theirs_label}{gone_theirs}\n")
    return body.encode()


def side_text(repo: pygit2.Repository, entry: pygit2.IndexEntry | None,
              limit: int) -> str | None:
    """A side's bytes as text, its first `limit` bytes (None: the side has no file)."""
    if entry is None:
        return None
    return lookup.blob_data(repo, entry.id)[:limit].decode("utf-8", "replace")


def _clashes(index: pygit2.Index) -> list[Clash]:
    if index.conflicts is None:
        return []
    out = []
    for ancestor, ours, theirs in index.conflicts:
        path = str((ours or theirs or ancestor).path)
        out.append(Clash(path, ancestor, ours, theirs, tuple(_under(index, path))))
    return out


def _under(index: pygit2.Index, path: str) -> list[str]:
    """The merged files under `path/`: a folder where a side of the clash has a file."""
    prefix = path + "/"
    return sorted(e.path for e in index if e.path.startswith(prefix))


def _file_mode(clash: Clash) -> FileMode:
    side = clash.ours or clash.theirs or clash.ancestor
    assert side is not None
    return side.mode if side.mode != FileMode.LINK else FileMode.BLOB


def _plain(label: str) -> str:
    """A label as one path component (`run/<hex>` has a slash)."""
    return label.replace("/", "_")


def _nl(text: str) -> str:
    return "\n" if text and not text.endswith("\n") else ""


# -- merging branches' workdirs -------------------------------------------------------------


@dataclass
class MergePlan:
    """The merged `workdir/` tree and what it took to get there."""

    into: str
    tips: list[pygit2.Oid]
    workdir_oid: pygit2.Oid
    conflicts: list[Conflicted] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)  # a merge turn's: each answer


def workdir_oid(commit: pygit2.Commit | None, empty: pygit2.Oid) -> pygit2.Oid:
    """The id of `commit`'s `workdir/` tree (`empty` when it has none)."""
    tree = workdir_tree(commit)
    return tree.id if tree is not None else empty


def _editable(git: GitSession, clash: Clash) -> bool:
    """Whether the page may offer the file for editing by hand: every side is UTF-8 text
    shown whole (a side cut at SIDE_CHARS, or bytes, would lose what the editor cannot show)."""
    for entry in (clash.ours, clash.theirs):
        if entry is None:
            continue
        data = lookup.blob_data(git.repo, entry.id)
        if len(data) > SIDE_CHARS or entry.mode == FileMode.LINK:
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _conflict(git: GitSession, clash: Clash, into: str, branch: str,
              resolutions: dict[str, str], before: list[str]) -> Conflicted:
    """One conflicted file as the page and the API show it: both sides (`ours`: the branch
    merged into, with the branches merged before this one; `theirs`: `branch`; a folder where
    the other side has a file: its names), the file with conflict markers to edit by hand,
    and whether the user's resolution settles it."""
    folder = list(clash.folder)
    editable = not folder and _editable(git, clash)
    mine = side_text(git.repo, clash.ours, SIDE_CHARS)
    other = side_text(git.repo, clash.theirs, SIDE_CHARS)
    if folder:
        more = " …" if len(folder) > FOLDER_NAMES else ""
        shown = f"(a folder: {', '.join(folder[:FOLDER_NAMES])}{more})"
        mine, other = (mine, shown) if clash.ours is not None else (shown, other)
    return {"path": clash.path, "ours": mine, "theirs": other,
            "branch": branch, "into": into, "editable": editable,
            "before": before,
            # The editor's start: git's markers, labelled in words for the person editing.
            "merged": markers(git.repo, clash, " + ".join(map(branch_words, [into, *before])),
                              branch_words(branch), SIDE_CHARS).decode("utf-8", "replace")
            if editable else None,
            "resolved": clash.path in resolutions, "resolution": resolutions.get(clash.path)}


def _best_base(git: GitSession, merged: list[pygit2.Oid], tip: pygit2.Oid) -> pygit2.Oid | None:
    # The newest of the merge bases with what is merged so far (HEAD and earlier tips).
    best: pygit2.Oid | None = None
    for oid in merged:
        # None when they share no commit: pygit2's stub types it a plain Oid.
        base: pygit2.Oid | None = git.repo.merge_base(oid, tip)
        if base is not None and (best is None or git.repo.descendant_of(base, best)):
            best = base
    return best


def _settle(git: GitSession, merged: Merged, clash: Clash, strategy: str, into: str,
            branch: str, text: str | None) -> None:
    """One clash the strategy leaves open. The user's own text settles it; a file against a
    folder keeps both (merge3's rule), the folder keeping the name under `agent` and `fail`,
    as git does; `agent` gives any other the file with markers, `fail` goes on with ours so
    that every conflict is listed."""
    if text is not None:
        merged.put(clash, text.encode())
    elif clash.folder_side is not None and strategy not in ("ours", "theirs"):
        merged.take(clash, clash.folder_side)
    elif strategy == "agent" and clash.folder_side is None:
        merged.put(clash, markers(git.repo, clash, into, branch, SIDE_CHARS))
    else:
        merged.take(clash, "theirs" if strategy == "theirs" else "ours")


def plan_merge(git: GitSession, branches: list[str], strategy: str,
               resolutions: dict[str, str] | None = None) -> MergePlan:
    """Merge each branch's workdir/ into HEAD's, in order, in memory (`merge`). Nothing
    is written but blobs and trees (unreferenced objects, harmless), so `fail` changes nothing.
    `resolutions` ({workdir path: text}): the user's own result for a conflicted file, which
    settles that file whatever the strategy (and so `fail` does not refuse for it)."""
    resolutions = resolutions or {}
    repo = git.repo
    empty = empty_tree(repo).id
    head = git.head_commit()
    into = git.branch
    merged = [head.id]
    ours_oid = workdir_oid(head, empty)
    plan = MergePlan(into=into, tips=[], workdir_oid=ours_oid)
    favor: Side | None = "ours" if strategy == "ours" else \
        "theirs" if strategy == "theirs" else None
    for name in branches:
        tip = git.commit(git.branch_tip(name))
        if tip.id == head.id or repo.descendant_of(head.id, tip.id):
            raise BadRequest(f"branch {name} is already merged into {into}")
        base_oid = _best_base(git, merged, tip.id)
        base = workdir_oid(git.commit(base_oid) if base_oid else None, empty)
        theirs = workdir_oid(tip, empty)
        result = merge(repo, base, ours_oid, theirs, favor=favor, labels=(into, name))
        before = branches[:branches.index(name)]  # merged into `ours` ahead of this one
        plan.conflicts += [_conflict(git, clash, into, name, resolutions, before)
                           for clash in result.conflicts]
        settled = set()
        for clash in result.open():
            _settle(git, result, clash, strategy, into, name, resolutions.get(clash.path))
            settled.add(clash.path)
        for clash in result.conflicts:  # a hunk `favor` settled: the user's text still wins
            if clash.path in resolutions and clash.path not in settled:
                result.put(clash, resolutions[clash.path].encode())
        ours_oid = result.tree()
        merged.append(tip.id)
        plan.tips.append(tip.id)
    plan.workdir_oid = ours_oid
    stray = sorted(set(resolutions) - {c["path"] for c in plan.conflicts})
    if stray:
        raise BadRequest(f"{', '.join(stray)} has no conflict in this merge: nothing was changed",
                         {"conflicts": plan.conflicts})
    return plan
