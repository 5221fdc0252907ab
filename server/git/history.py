"""The history layout (DESIGN §3) and the in-memory listings that keep its reads O(change).

`history/AAA/BB/<seq>-<role>-<id>.json` and `runs/AAA/BB/<run_id>.json` (AAA = n // 10000,
BB = n // 100 % 100): a checkpoint rewrites a few trees of at most 100 entries, however long
the chat. Sessions written with the earlier layout (`history/NNN/…`, `runs/NNN/…`, 1,000 per
folder) keep it: a tree's layout is read from the tree itself, so old sessions open, show,
revert and continue, and every reader here takes both.

A `Listing` is the flat view of one such tree (its leaf folders in order and their entries).
The listing of another version of the tree shares the leaf folders both begin with (a
`Folder` is never changed once read) and reads only those that differ, so the branch's
messages stay in memory with the open session and a new checkpoint costs the folders it
touched, not the chat: nothing is copied per message (issue 30), and what a listing hands
out (`Chunked`, `Totals`: read-only views over its folders) never changes under its holder.
Like every pygit2 object, listings stay on their thread.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain
from typing import Any, TypeVar, overload

import pygit2

from server.git import lookup

HISTORY = "history"
RUNS = "runs"
LEGACY_SHARD = 1000
CACHED_LISTINGS = 12  # listings share their folders: a few pointer arrays each
T = TypeVar("T")


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


class Chunked(Sequence[T]):
    """A read-only sequence made of parts (a listing's folders, oldest first) that are shared
    between listings and never changed: a new listing holds its source's parts, not a copy
    of their items, so nothing a caller holds changes under it."""

    __slots__ = ("_parts", "_starts", "_len")

    def __init__(self, parts: Sequence[Sequence[T]], starts: Sequence[int], length: int) -> None:
        self._parts, self._starts, self._len = parts, starts, length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self._len)
            if step != 1:
                return [self[j] for j in range(lo, hi, step)]
            out: list[T] = []
            if lo >= hi:
                return out
            k = bisect_right(self._starts, lo) - 1  # from the folder holding `lo`, not the first
            at = lo - self._starts[k]
            while len(out) < hi - lo:
                out += self._parts[k][at:at + hi - lo - len(out)]
                k, at = k + 1, 0
            return out
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("index out of range")
        k = bisect_right(self._starts, i) - 1
        return self._parts[k][i - self._starts[k]]

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self._parts)

    def __reversed__(self) -> Iterator[T]:
        return chain.from_iterable(reversed(p) for p in reversed(self._parts))


class Totals(Sequence[int]):
    """Running totals `[0, c0, c0+c1, ...]` made of each folder's own (shared, never changed)
    and the sum of the folders before it (the listing's own, one number a folder)."""

    __slots__ = ("_local", "_bases", "_starts", "_len")

    def __init__(self, local: Sequence[Sequence[int]], bases: Sequence[int],
                 starts: Sequence[int], count: int) -> None:
        self._local, self._bases, self._starts, self._len = local, bases, starts, count + 1

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("index out of range")
        if i == 0:
            return 0
        k = bisect_right(self._starts, i - 1) - 1
        return self._bases[k] + self._local[k][i - 1 - self._starts[k]]


class Folder:
    """One leaf folder of a listed tree: its files, and (filled on demand, then never
    changed) their parsed messages, their running totals by name, their stems. Shared by
    every listing that holds the folder at the same place."""

    __slots__ = ("path", "oid", "files", "messages", "totals", "stems", "copied", "ids",
                 "_kept", "_kept_totals")

    def __init__(self, path: str, oid: pygit2.Oid, files: tuple[ListedFile, ...],
                 prior: Folder | None = None) -> None:
        self.path, self.oid, self.files = path, oid, files
        self.messages: tuple[Any, ...] | None = None
        self.totals: dict[str, tuple[int, ...]] = {}
        self.stems: dict[str, int] | None = None
        self.copied: frozenset[str] | None = None  # the ids its messages are copies of
        self.ids: frozenset[str] | None = None
        # The same folder at an earlier version (a checkpoint adds files to the newest
        # folder): what it parsed for the files both begin with is taken, not read again
        # (copied: a folder never holds on to its earlier versions).
        self._kept: tuple[Any, ...] = ()
        self._kept_totals: dict[str, tuple[int, ...]] = {}
        if prior is not None and prior.messages is not None:
            same, limit = 0, min(len(files), len(prior.files))
            while same < limit and files[same] == prior.files[same]:
                same += 1
            self._kept = prior.messages[:same]
            self._kept_totals = {name: t[:same] for name, t in prior.totals.items()}

    def parsed(self, load: Callable[[pygit2.Oid], Any]) -> tuple[Any, ...]:
        if self.messages is None:
            kept = self._kept
            self.messages = kept + tuple(load(f.blob) for f in self.files[len(kept):])
            self._kept = ()
        return self.messages

    def total(self, name: str, cost: Callable[[Any], int]) -> tuple[int, ...]:
        """This folder's own running totals of `cost` (without the leading 0); `parsed`
        first."""
        got = self.totals.get(name)
        if got is None:
            assert self.messages is not None
            kept = self._kept_totals.pop(name, ())
            more = accumulate((cost(m) for m in self.messages[len(kept):]),
                              initial=kept[-1] if kept else 0)
            next(more)  # the initial value
            got = self.totals[name] = kept + tuple(more)
        return got


@dataclass
class Listing:
    """The flat view of one tree (`history/` or `runs/`): its leaf folders in order, each
    shared with the listings it came from and never changed; what it hands out (its
    entries, messages, sums) never changes either."""

    top: str
    tree_id: pygit2.Oid | None = None
    legacy: bool = False
    folders: tuple[Folder, ...] = ()
    starts: list[int] = field(default_factory=list)  # each folder's first entry's index
    count: int = 0
    shards: list[tuple[str, pygit2.Oid]] = field(default_factory=list)  # (path, oid) a folder
    # Filled on demand: the parsed messages (history) and the running totals of their
    # token estimates by the estimate's name (whole, masked...).
    parsed: Chunked[Any] | None = None
    sums: dict[str, Totals] = field(default_factory=dict)
    # A folder each, the first ones taken from the listing this one was made from (a slice
    # of pointers, not a loop over its folders), the rest filled when asked for.
    file_parts: list[tuple[ListedFile, ...]] = field(default_factory=list)
    message_parts: list[tuple[Any, ...]] = field(default_factory=list)
    sum_parts: dict[str, tuple[list[tuple[int, ...]], list[int]]] = field(default_factory=dict)
    _entries: Chunked[ListedFile] | None = None

    @property
    def entries(self) -> Chunked[ListedFile]:
        if self._entries is None:
            self._entries = Chunked(self.file_parts, self.starts, self.count)
        return self._entries

    def next_number(self) -> int:
        """The next seq (history) or ordinal (runs): after the last entry of the last folder,
        so the newest folder never holds more than its share."""
        if not self.folders:
            return 0
        if self.top == HISTORY:
            return self.entries[-1].seq + 1 if self.count else 0
        if self.legacy:
            return self.count
        last = self.folders[-1]
        aaa, bb = last.path.split("/")[1:3]
        return int(aaa) * 10000 + int(bb) * 100 + len(last.files)

    def find(self, stem: str) -> ListedFile | None:
        """The file named `stem` (+ its extension): the newest folders looked at first, where
        the runs a turn asks for are."""
        for folder in reversed(self.folders):
            if folder.stems is None:
                folder.stems = {f.name.rsplit(".", 1)[0]: i for i, f in enumerate(folder.files)}
            at = folder.stems.get(stem)
            if at is not None:
                return folder.files[at]
        return None


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
    held = listing.shards
    limit = min(len(shards), len(held))
    keep = max(limit - 2, 0)  # a checkpoint changes the last folder or two: one compare in C
    if shards[:keep] != held[:keep]:
        keep = 0
    while keep < limit and shards[keep] == held[keep]:
        keep += 1
    return keep


def moved_listing(repo: pygit2.Repository, base: Listing | None, top: str,
                  tree: pygit2.Tree | None,
                  layout: tuple[bool, list[tuple[str, pygit2.Oid]]] | None = None) -> Listing:
    """The listing of `tree` (the top folder at some commit), sharing with `base` the leaf
    folders both begin with and reading only the others (`layout`: the tree's, when already
    read). `base` is left as it was."""
    if tree is None:
        return Listing(top)
    legacy, shards = layout or tree_shards(top, tree)
    new = Listing(top, tree.id, legacy, shards=shards)
    keep = common_shards(base, legacy, shards) if base is not None else 0
    old: tuple[Folder, ...] = ()
    folders: list[Folder] = []
    if base is not None:
        old = base.folders
        folders, new.starts = list(old[:keep]), base.starts[:keep]
        new.file_parts = base.file_parts[:keep]
        new.message_parts = base.message_parts[:keep]
        new.sum_parts = {name: (local[:keep], bases[:keep])
                         for name, (local, bases) in base.sum_parts.items()}
    count = new.starts[-1] + len(folders[-1].files) if folders else 0
    for k, (path, oid) in enumerate(shards[keep:], keep):
        files: list[ListedFile] = []
        for entry in lookup.tree_at(repo, oid):
            name = entry.name
            if isinstance(entry, pygit2.Tree) or name is None:  # a tree's entries have names
                continue
            files.append(ListedFile(f"{path}/{name}", _number(top, name, count + len(files)),
                                    entry.id, name))
        prior = old[k] if k < len(old) and old[k].path == path else None
        new.starts.append(count)
        folders.append(Folder(path, oid, tuple(files), prior))
        new.file_parts.append(folders[-1].files)
        count += len(files)
    new.folders, new.count = tuple(folders), count
    return new


class Listings:
    """A few listings per top folder, most recently used last; a miss makes a listing from
    the one sharing the most leaf folders with the new tree (after a checkpoint: the newest),
    sharing those folders (not copying them), so a new commit, or switching between a branch
    and its fork, reads only what differs, and a long branch shown again after a short
    fork's turns is not read afresh. What a listing hands out never changes."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self._by_top: dict[str, OrderedDict[pygit2.Oid | None, Listing]] = {
            HISTORY: OrderedDict(), RUNS: OrderedDict()}
        # The leaf folders of each `AAA/` folder read (by its path and id): a full one never
        # changes, so a new tree reads only its changed `AAA/`'s folders, not all of them.
        self._groups: dict[tuple[str, pygit2.Oid], list[tuple[str, pygit2.Oid]]] = {}

    def layout(self, top: str, tree: pygit2.Tree) -> tuple[bool, list[tuple[str, pygit2.Oid]]]:
        """`tree_shards`, each unchanged `AAA/` folder's leaf folders kept from the last read."""
        if is_legacy(tree):
            return True, _leaf_shards(tree, top, 1)
        out: list[tuple[str, pygit2.Oid]] = []
        for entry in tree:
            if not isinstance(entry, pygit2.Tree):
                continue
            key = (f"{top}/{entry.name}", entry.id)
            leaves = self._groups.get(key)
            if leaves is None:
                if len(self._groups) >= 4 * CACHED_LISTINGS:
                    self._groups.clear()
                leaves = self._groups[key] = _leaf_shards(entry, key[0], 1)
            out += leaves
        return False, out

    def get(self, top: str, tree: pygit2.Tree | None) -> Listing:
        cache = self._by_top[top]
        key = tree.id if tree is not None else None
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        layout = self.layout(top, tree) if tree is not None else None
        listing = moved_listing(self.repo, _base(cache, layout), top, tree, layout)
        cache[key] = listing
        while len(cache) > CACHED_LISTINGS:
            cache.popitem(last=False)
        return listing

    def holds_copied(self, tree: pygit2.Tree | None, load: Callable[[pygit2.Oid], Any]) -> bool:
        """Whether a message of the tree is a copy (`copied_from`) of another message of the
        tree: each folder's copies and ids kept with it, so a turn asks its new folders."""
        self.messages(tree, load)
        folders = self.get(HISTORY, tree).folders
        copied: set[str] = set()
        for folder in folders:
            if folder.copied is None:
                assert folder.messages is not None
                folder.copied = frozenset(m["copied_from"] for m in folder.messages
                                          if m.get("copied_from"))
            copied |= folder.copied
        if not copied:
            return False
        for folder in folders:
            if folder.ids is None:
                assert folder.messages is not None
                folder.ids = frozenset(m["id"] for m in folder.messages)
            if not copied.isdisjoint(folder.ids):
                return True
        return False

    def messages(self, tree: pygit2.Tree | None,
                 load: Callable[[pygit2.Oid], Any]) -> Chunked[Any]:
        """The parsed messages of a `history/` tree, oldest first (shared: do not change)."""
        listing = self.get(HISTORY, tree)
        if listing.parsed is None:
            parts = listing.message_parts
            parts += [f.parsed(load) for f in listing.folders[len(parts):]]
            listing.parsed = Chunked(parts, listing.starts, listing.count)
        return listing.parsed

    def sums(self, tree: pygit2.Tree | None, load: Callable[[pygit2.Oid], Any],
             cost: Callable[[Any], int], name: str = "") -> Totals:
        """Running totals of `cost` (kept under `name`) over the tree's messages (`[0, c0,
        c0+c1, ...]`): each folder's kept with it, so a new listing sums its new folders
        only."""
        self.messages(tree, load)
        listing = self.get(HISTORY, tree)
        got = listing.sums.get(name)
        if got is None:
            local, bases = listing.sum_parts.setdefault(name, ([], []))
            for folder in listing.folders[len(local):]:
                bases.append(bases[-1] + (local[-1][-1] if local[-1] else 0) if local else 0)
                local.append(folder.total(name, cost))
            got = listing.sums[name] = Totals(local, bases, listing.starts, listing.count)
        return got


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
        common_shards(lst, legacy, shards), len(lst.message_parts)))


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
