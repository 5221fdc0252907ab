"""Readable names for branches and runs on the page ("Edit of message 3", "sub-agent alpha",
"turn 4"); the hash stays on hover only (a `title`). The names of a session are loaded once per
render entry point (a page, a socket frame, a partial) and read by the templates' filters
through a context variable, so every partial names things the same way."""

from __future__ import annotations

import re
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any

from markupsafe import Markup, escape

from server.base.records import RunRow
from server.features.merge import MODEL_LINES, NOTE_HEAD
from server.git.branches import RUN_BRANCH, SUB_BRANCH, SUB_PREFIX, is_run, is_sub, run_branch

_NAMES: ContextVar[Names | None] = ContextVar("braid_names", default=None)
_RUN_BRANCH = RUN_BRANCH
_SUB_BRANCH = SUB_BRANCH
_HEX = re.compile(r"(?<![0-9a-zA-Z])[0-9a-f]{7,40}(?![0-9a-zA-Z])")
_AT_COMMIT = re.compile(r" at commit `?[0-9a-f]{7,40}`?")
_ANY = re.compile(rf"{_RUN_BRANCH.pattern}|{_SUB_BRANCH.pattern}|{_HEX.pattern}")


def sub_label(branch: str) -> str | None:
    match = _SUB_BRANCH.fullmatch(branch)
    return f"sub-agent {match.group(1)}" if match else None


def _order(run: RunRow) -> tuple[str, str]:
    return (run.get("created_at") or "", run["run_id"])


class Names:
    def __init__(self, runs: list[RunRow]) -> None:
        self.runs: dict[str, RunRow] = {}
        self.turn_no: dict[str, int] = {}
        self.branch_names: dict[str, str] = {}
        self._seen: dict[str, int] = {}
        self._last: tuple[str, str] | None = None
        self.extend(sorted(runs, key=_order))

    def extend(self, runs: list[RunRow]) -> bool:
        """Name runs newer than every run named so far (oldest first); False, changing
        nothing, when one of them is not newer (then the names must be made afresh)."""
        fresh = [r for r in sorted(runs, key=_order) if r["run_id"] not in self.runs]
        if fresh and self._last is not None and _order(fresh[0]) < self._last:
            return False
        for run in fresh:
            self.runs[run["run_id"]] = run
            if not str(run.get("branch") or "").startswith(SUB_PREFIX):
                self.turn_no[run["run_id"]] = len(self.turn_no) + 1
            name = self._fork_name(run)
            if name:
                self._seen[name] = self._seen.get(name, 0) + 1
                if self._seen[name] > 1:
                    name = f"{name} ({self._seen[name]})"
                self.branch_names[run_branch(run["run_id"])] = name
        if fresh:
            self._last = _order(fresh[-1])
        return True

    @property
    def last_created(self) -> str | None:
        return self._last[0] if self._last else None

    def _fork_name(self, run: RunRow) -> str | None:
        """"Edit of turn 2" (its message edited), "Fork of turn 2 at message 3" (continued
        from a later message of that run's): the turn as the page numbers it, 1-based."""
        if run.get("regenerated_from"):
            return "Regenerated answer"
        k = run.get("forked_from_message_index")
        source = run.get("forked_from_run_id")
        if not source or not isinstance(k, int):
            return None
        turn = self.turn_no.get(str(source))
        of = f"turn {turn}" if turn else "an earlier turn"
        return f"Edit of {of}" if k == 0 else f"Fork of {of} at message {k + 1}"

    def branch(self, name: str) -> str:
        if name in self.branch_names:
            return self.branch_names[name]
        sub = sub_label(name)
        if sub:
            return sub
        if _RUN_BRANCH.fullmatch(name):
            return "another version"
        return name

    def run(self, run_id: str) -> str | None:
        if run_id in self.turn_no:
            return f"turn {self.turn_no[run_id]}"
        matches = [r for r in self.turn_no if r.startswith(run_id)] if len(run_id) >= 7 else []
        if len(matches) == 1:
            return f"turn {self.turn_no[matches[0]]}"
        return None


def use(names: Names) -> Names:
    """The names this render reads (an event's view brings them, read once)."""
    _NAMES.set(names)
    return names


# The names of recently rendered sessions, kept up to date by reading only the runs made
# since (a turn adds one): (the index they came from, the names), by session.
_KEPT: OrderedDict[str, tuple[Any, Names]] = OrderedDict()
KEPT_SESSIONS = 64


async def names_of(index: Any, session_id: str) -> Names:
    """The session's names: the kept ones moved on by the runs made since (runs are made
    in time order and never change the fields names are made of), else all read afresh."""
    kept = _KEPT.get(session_id)
    names = kept[1] if kept is not None and kept[0] is index else None
    count = await index.count_runs(session_id)
    if names is not None and names.last_created is not None:
        if not names.extend(await index.runs_since(session_id, names.last_created)):
            names = None
    if names is None or len(names.runs) != count:
        names = Names(await index.list_runs(session_id))
    _KEPT[session_id] = (index, names)
    _KEPT.move_to_end(session_id)
    while len(_KEPT) > KEPT_SESSIONS:
        _KEPT.popitem(last=False)
    return names


async def load_names(braid: Any, session_id: str) -> Names:
    """Names for this render (two small index queries once the session's are kept)."""
    return use(await names_of(braid.index, session_id))


def current() -> Names:
    return _NAMES.get() or Names([])


def branch_label(name: object) -> str:
    return current().branch(str(name or ""))


def readable(text: object) -> str:
    """Plain text with branch names, run ids and commit ids replaced by readable words (for
    the message Braid writes when a sub-agent finishes, rendered as Markdown after this)."""
    names = current()

    def name(match: re.Match[str]) -> str:
        token = match.group(0)
        if is_run(token) or is_sub(token):
            return names.branch(token)
        return names.run(token) or "its last commit"

    text = _AT_COMMIT.sub("", str(text or ""))  # "…at commit `<sha>`" says nothing readable
    return _ANY.sub(name, text)


def note_for_people(text: object) -> str:
    """A note as the page shows it: a merge turn's note without the lines meant for the
    model (its instructions), headed "2 branches merged into main…" rather than "Merge
    turn: …". Other notes as they are."""
    raw = str(text or "")
    if not raw.startswith(NOTE_HEAD):
        return raw
    lines = [line for line in raw.split("\n") if line not in MODEL_LINES]
    return "\n".join([lines[0][len(NOTE_HEAD):], *lines[1:]])


def humanize(text: object) -> Markup:
    """Text Braid wrote (notes, commit summaries) with ids and branch names made readable;
    each keeps its hash on hover. A hex word that names no run is left as it is."""
    names = current()
    raw = str(text or "")
    out: list[str] = []
    last = 0
    for match in _ANY.finditer(raw):
        token = match.group(0)
        before = raw[last:match.start()]
        if is_run(token) or is_sub(token):
            label = names.branch(token)
        elif re.search(r"(?i)\bsession $", before):  # "Fork of session <id>"
            before, label = before[:-len("session ")], "another session"
        else:
            label = names.run(token) or ""
            if not label:
                continue
            # "Turn <id> was reverted" reads "Turn 3 was reverted", not "Turn turn 3".
            word = re.search(r"(?i)\b(turn|run) $", before)
            if word and label.startswith("turn "):
                before = before[:word.start()]
                label = ("Turn" if word.group(1)[0].isupper() else "turn") + label[4:]
        out.append(str(escape(before)))
        out.append(f'<span class="named" title="{escape(token)}">{escape(label)}</span>')
        last = match.end()
    out.append(str(escape(raw[last:])))
    return Markup("".join(out))
