"""The one three-way merge of trees: revert, merge and update from source all call `merge`.

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

from server.git import lookup
from server.git.trees import Entry

Side = Literal["ours", "theirs"]
NO_RENAMES = MergeFlag(0)  # each conflict is then about one path, on both sides
FAVOR = {"ours": MergeFavor.OURS, "theirs": MergeFavor.THEIRS}


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
