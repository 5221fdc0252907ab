"""The history layout (DESIGN §3) and the in-memory listings that keep its reads O(change).

`history/AAA/BB/<seq>-<role>-<id>.json` and `runs/AAA/BB/<run_id>.json` (AAA = n // 10000,
BB = n // 100 % 100): a checkpoint rewrites a few trees of at most 100 entries, however long
the chat. Sessions written with the earlier layout (`history/NNN/…`, `runs/NNN/…`, 1,000 per
folder) keep it: a tree's layout is read from the tree itself, so old sessions open, show,
revert and continue, and every reader here takes both.

A `Listing` is the flat view of one such tree (its leaf folders in order and their entries).
Moving it to another version of the tree re-reads only the leaf folders that differ, so the
branch's messages stay in memory with the open session and a new checkpoint costs the
folders it touched, not the chat. Like every pygit2 object, listings stay on their thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pygit2

from server.git import lookup

HISTORY = "history"
RUNS = "runs"
LEGACY_SHARD = 1000
CACHED_LISTINGS = 12  # copies share their entries and messages: a few pointer arrays each


def history_path(seq: int, role: str, message_id: str, legacy: bool = False) -> str:
    if legacy:
        return f"{HISTORY}/{seq // LEGACY_SHARD:03d}/{seq:06d}-{role}-{message_id}.json"
    return f"{HISTORY}/{seq // 10000:03d}/{seq // 100 % 100:02d}/{seq:06d}-{role}-{message_id}.json"


def run_path(ordinal: int, run_id: str, legacy: bool = False) -> str:
    if legacy:
        return f"{RUNS}/{ordinal // LEGACY_SHARD:03d}/{run_id}.json"
    return f"{RUNS}/{ordinal // 10000:03d}/{ordinal // 100 % 100:02d}/{run_id}.json"


def is_legacy(tree: pygit2.Tree | None) -> bool:
    """A `history/` or `runs/` tree in the earlier layout: its folders hold files directly."""
    if tree is None:
        return False
    for shard in tree:
        if isinstance(shard, pygit2.Tree):
            for entry in shard:
                return not isinstance(entry, pygit2.Tree)
    return False


@dataclass(frozen=True)
class ListedFile:
    """One file of a listed tree: its repo-relative path, its number (a message's seq, a
    run's ordinal) and its blob."""

    path: str
    seq: int
    blob: pygit2.Oid
    name: str


@dataclass
class Listing:
    top: str
    tree_id: pygit2.Oid | None = None
    legacy: bool = False
    shards: list[tuple[str, pygit2.Oid]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    entries: list[ListedFile] = field(default_factory=list)
    # Filled on demand: run id → entry index (runs), parsed messages (history), and the
    # running totals of the messages' token estimates (sums[name][k]: the first k
    # messages', by the estimate's name: whole, masked...).
    by_stem: dict[str, int] | None = None
    messages: list[Any] | None = None
    sums: dict[str, list[int]] = field(default_factory=dict)

    def copy(self) -> Listing:
        return Listing(self.top, self.tree_id, self.legacy, list(self.shards), list(self.starts),
                       list(self.entries))

    def next_number(self) -> int:
        """The next seq (history) or ordinal (runs): after the last entry of the last folder,
        so the newest folder never holds more than its share."""
        if not self.shards:
            return 0
        if self.top == HISTORY:
            return self.entries[-1].seq + 1 if self.entries else 0
        if self.legacy:
            return len(self.entries)
        path, _ = self.shards[-1]
        aaa, bb = path.split("/")[1:3]
        return int(aaa) * 10000 + int(bb) * 100 + (len(self.entries) - self.starts[-1])


def _leaf_shards(tree: pygit2.Tree, prefix: str, depth: int) -> list[tuple[str, pygit2.Oid]]:
    out: list[tuple[str, pygit2.Oid]] = []
    for entry in tree:  # git keeps tree entries sorted; the names are zero-padded
        if not isinstance(entry, pygit2.Tree):
            continue
        path = f"{prefix}/{entry.name}"
        if depth == 1:
            out.append((path, entry.id))
        else:
            out.extend(_leaf_shards(entry, path, depth - 1))
    return out


def _number(top: str, name: str, ordinal: int) -> int:
    if top == HISTORY:
        head = name.split("-", 1)[0]
        return int(head) if head.isdigit() else ordinal
    return ordinal


def tree_shards(top: str, tree: pygit2.Tree) -> tuple[bool, list[tuple[str, pygit2.Oid]]]:
    """A tree's layout (legacy or not) and its leaf folders in order."""
    legacy = is_legacy(tree)
    return legacy, _leaf_shards(tree, top, 1 if legacy else 2)


def common_shards(listing: Listing, legacy: bool, shards: list[tuple[str, pygit2.Oid]]) -> int:
    """How many leading leaf folders `listing` shares with a tree's (its reusable part)."""
    if legacy != listing.legacy:
        return 0
    keep, limit = 0, min(len(shards), len(listing.shards))
    while keep < limit and shards[keep] == listing.shards[keep]:
        keep += 1
    return keep


def move_listing(repo: pygit2.Repository, listing: Listing, tree: pygit2.Tree | None,
                 layout: tuple[bool, list[tuple[str, pygit2.Oid]]] | None = None) -> None:
    """Bring `listing` to `tree` (the top folder at another commit), re-reading only the leaf
    folders that differ from the ones it holds (`layout`: the tree's, when already read)."""
    if tree is None:
        listing.tree_id, listing.shards, listing.starts, listing.entries = None, [], [], []
        listing.by_stem = listing.messages = None
        listing.sums = {}
        return
    if listing.tree_id == tree.id:
        return
    legacy, shards = layout or tree_shards(listing.top, tree)
    keep = common_shards(listing, legacy, shards)
    cut = listing.starts[keep] if keep < len(listing.starts) else len(listing.entries)
    if listing.by_stem is not None:
        for gone in listing.entries[cut:]:
            listing.by_stem.pop(gone.name.rsplit(".", 1)[0], None)
    del listing.entries[cut:]
    del listing.starts[keep:]
    _read_shards(repo, listing, shards[keep:])
    listing.tree_id, listing.legacy, listing.shards = tree.id, legacy, shards
    if listing.messages is not None:
        del listing.messages[cut:]
    for totals in listing.sums.values():
        del totals[cut + 1:]
    if listing.by_stem is not None:
        for i in range(cut, len(listing.entries)):
            listing.by_stem[listing.entries[i].name.rsplit(".", 1)[0]] = i


def _read_shards(repo: pygit2.Repository, listing: Listing,
                 shards: list[tuple[str, pygit2.Oid]]) -> None:
    """Append the entries of these leaf folders to the listing."""
    for path, oid in shards:
        listing.starts.append(len(listing.entries))
        for entry in lookup.tree_at(repo, oid):
            name = entry.name
            if isinstance(entry, pygit2.Tree) or name is None:  # a tree's entries have names
                continue
            n = len(listing.entries)
            listing.entries.append(ListedFile(f"{path}/{name}", _number(listing.top, name, n),
                                         entry.id, name))


class Listings:
    """A few listings per top folder, most recently used last; a miss moves a copy of the
    one sharing the most leaf folders with the new tree (after a checkpoint: the newest),
    so a new commit, or switching between a branch and its fork, re-reads only what
    differs, and a long branch shown again after a short fork's turns is not read afresh."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self._by_top: dict[str, OrderedDict[pygit2.Oid | None, Listing]] = {
            HISTORY: OrderedDict(), RUNS: OrderedDict()}

    def get(self, top: str, tree: pygit2.Tree | None) -> Listing:
        cache = self._by_top[top]
        key = tree.id if tree is not None else None
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        layout = tree_shards(top, tree) if tree is not None else None
        base = _base(cache, layout)
        listing = base.copy() if base is not None else Listing(top)
        if base is not None:
            listing.messages = list(base.messages) if base.messages is not None else None
            listing.sums = {name: list(totals) for name, totals in base.sums.items()}
            listing.by_stem = dict(base.by_stem) if base.by_stem is not None else None
        move_listing(self.repo, listing, tree, layout)
        cache[key] = listing
        while len(cache) > CACHED_LISTINGS:
            cache.popitem(last=False)
        return listing

    def messages(self, tree: pygit2.Tree | None, load: Callable[[pygit2.Oid], Any]) -> list[Any]:
        """The parsed messages of a `history/` tree, oldest first (shared: do not change)."""
        listing = self.get(HISTORY, tree)
        if listing.messages is None:
            listing.messages = []
        have = len(listing.messages)
        if have < len(listing.entries):
            listing.messages.extend(load(e.blob) for e in listing.entries[have:])
        return listing.messages

    def sums(self, tree: pygit2.Tree | None, load: Callable[[pygit2.Oid], Any],
             cost: Callable[[Any], int], name: str = "") -> list[int]:
        """Running totals of `cost` (kept under `name`) over the tree's messages (`[0, c0,
        c0+c1, ...]`), kept and extended by the new messages only (shared: do not change)."""
        messages = self.messages(tree, load)
        listing = self.get(HISTORY, tree)
        sums = listing.sums.setdefault(name, [0])
        for msg in messages[len(sums) - 1:]:
            sums.append(sums[-1] + cost(msg))
        return sums

    def run_index(self, tree: pygit2.Tree | None) -> tuple[Listing, dict[str, int]]:
        listing = self.get(RUNS, tree)
        if listing.by_stem is None:
            listing.by_stem = {e.name.rsplit(".", 1)[0]: i for i, e in enumerate(listing.entries)}
        return listing, listing.by_stem


def _base(cache: OrderedDict[pygit2.Oid | None, Listing],
          layout: tuple[bool, list[tuple[str, pygit2.Oid]]] | None) -> Listing | None:
    """The cached listing to move to a new tree: the newest when it differs in at most its
    last two folders (a checkpoint), else the one sharing the most folders (parsed first)."""
    if not cache:
        return None
    newest = next(reversed(cache.values()))
    if layout is None:
        return newest
    legacy, shards = layout
    if common_shards(newest, legacy, shards) >= len(shards) - 2:
        return newest
    return max(reversed(cache.values()), key=lambda lst: (
        common_shards(lst, legacy, shards), lst.messages is not None))


@dataclass
class _Line:
    oids: list[pygit2.Oid]
    pos: dict[pygit2.Oid, int]


class Lines:
    """First-parent lines of branches, oldest commit first, kept in memory: a line is walked
    once, then only its new commits (a moved tip walks back until a commit it knows)."""

    KEEP = 8

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self._lines: list[_Line] = []

    def holds(self, tip: pygit2.Oid, oid: pygit2.Oid) -> bool:
        """Whether `oid` is on the first-parent line ending at `tip`."""
        self.get(tip)
        line = next(ln for ln in self._lines if tip in ln.pos)
        at = line.pos.get(oid)
        return at is not None and at <= line.pos[tip]

    def get(self, tip: pygit2.Oid) -> tuple[list[pygit2.Oid], int]:
        """The line ending at `tip` as (commit ids, index of `tip`). Shared: do not change."""
        for line in self._lines:
            at = line.pos.get(tip)
            if at is not None:
                return line.oids, at
        walked: list[pygit2.Oid] = []
        base: tuple[_Line, int] | None = None
        oid: pygit2.Oid | None = tip
        while oid is not None:
            hit = next(((ln, ln.pos[oid]) for ln in self._lines if oid in ln.pos), None)
            if hit is not None:
                base = hit
                break
            walked.append(oid)
            parents = lookup.commit_at(self.repo, oid).parent_ids
            oid = parents[0] if parents else None
        walked.reverse()
        if base is not None and base[1] == len(base[0].oids) - 1:
            line = base[0]  # the tip moved on: extend the line in place
        elif base is not None:
            kept = base[0].oids[:base[1] + 1]
            line = _Line(kept, {o: i for i, o in enumerate(kept)})
            self._lines.append(line)
        else:
            line = _Line([], {})
            self._lines.append(line)
        for oid in walked:
            line.pos[oid] = len(line.oids)
            line.oids.append(oid)
        del self._lines[:-self.KEEP]
        return line.oids, len(line.oids) - 1
