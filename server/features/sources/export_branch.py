"""Export to a branch of the source repository (DESIGN §4 "Import and export").

The session's line of commits since the import is replayed onto the import's base commit in
the source repository: one commit per turn that changed files (its request and one-line
answer as the message, trailers `Braid-Session`, `Braid-Run`), reverted turns and the
revert/unrevert commits left out, a sub-agent merge as a merge commit whose other parents are
the sub-agent branches replayed the same way, an "Update from source" as a merge with the
source commit it brought in. Only objects and `refs/heads/braid/...` are written in the
source: never its working tree, index or HEAD.

Replaying is deterministic (each commit's time is its session commit's), so exporting again
rebuilds the same commits and the branch fast-forwards to the new ones; when the branch has
moved some other way (a commit on it, a turn reverted after the export), the export goes to
a new branch name instead of overwriting anything."""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field

import pygit2

from server.agent.turn_changes import trailers_of
from server.base.errors import BadRequest
from server.base.records import MessageRecord, RunRecord, SessionMeta
from server.base.results import BranchExport
from server.git import lookup
from server.git.commits import first_parent_line
from server.git.session import GitSession
from server.git.trees import apply_changes, copy_blobs, empty_tree, tree_changes
from server.git.workdir.scan import workdir_tree
from server.store import layout

SKIPPED_KINDS = frozenset({"revert", "unrevert"})
NAME, EMAIL = "Braid", "braid@localhost"


def slug(title: str, session_id: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-")
    return f"{words}-{session_id[:6]}" if words else session_id[:12]


@dataclass
class Group:
    """Consecutive session commits exported as one commit."""

    key: tuple[str, str | None]
    commits: list[pygit2.Commit] = field(default_factory=list)


@dataclass
class Replay:
    session: GitSession
    src: pygit2.Repository
    session_id: str
    # session commit id → the exported commit standing for the state after it
    mapped: dict[pygit2.Oid, pygit2.Oid] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)

    def run_texts(self, tip: pygit2.Commit
                  ) -> tuple[dict[str, RunRecord], dict[str, list[MessageRecord]]]:
        runs = {r["run_id"]: r for r in layout.runs(self.session, tip)}
        messages: dict[str, list[MessageRecord]] = {}
        for msg in layout.messages(self.session, tip):
            messages.setdefault(msg.get("run_id") or "", []).append(msg)
        return runs, messages

    def line(self, tip: pygit2.Commit) -> list[pygit2.Commit]:
        """`tip`'s first-parent commits after the first one already mapped (oldest first)."""
        out: list[pygit2.Commit] = []
        for commit in first_parent_line(tip):
            if commit.id in self.mapped:
                return out[::-1]
            out.append(commit)
        raise BadRequest("this session's history does not start from its import")

    def replay(self, tip: pygit2.Commit) -> pygit2.Oid:
        runs, messages = self.run_texts(tip)
        reverted = {rid for rid, r in runs.items() if r.get("reverted")}
        commits = self.line(tip)
        head = self.mapped[commits[0].parents[0].id] if commits else self.mapped[tip.id]
        for group in _groups(commits):
            kind, run_id = group.key
            if kind not in SKIPPED_KINDS and run_id not in reverted:
                head = self.commit_group(head, group, runs, messages)
            for commit in group.commits:
                self.mapped[commit.id] = head
        return head

    def commit_group(self, head: pygit2.Oid, group: Group, runs: dict[str, RunRecord],
                     messages: dict[str, list[MessageRecord]]) -> pygit2.Oid:
        first, last = group.commits[0], group.commits[-1]
        before = first.parents[0] if first.parents else None
        changes = tree_changes(workdir_tree(before), workdir_tree(last))
        extra = self.extra_parents(group, before)
        if not changes and not extra:
            return head
        copy_blobs(self.src, self.session.repo, changes)
        base = self.src[head].peel(pygit2.Commit).tree
        tree = apply_changes(self.src, base, changes)
        tree_id = tree.id if tree is not None else empty_tree(self.src).id
        sig = pygit2.Signature(NAME, EMAIL, last.commit_time, last.commit_time_offset)
        message = self.message(group, runs, messages)
        oid = self.src.create_commit(None, sig, sig, message, tree_id, [head, *extra])
        self.made.append(str(oid))
        return oid

    def extra_parents(self, group: Group, before: pygit2.Commit | None) -> list[pygit2.Oid]:
        kind, _ = group.key
        first = group.commits[0]
        if kind == "merge":
            return [self.replay(p) for p in first.parents[1:]]
        if kind == "user-edit":
            moved = _source_moved(self.session, before, group.commits[-1])
            if moved and moved in self.src:
                return [pygit2.Oid(hex=moved)]
        return []

    def message(self, group: Group, runs: dict[str, RunRecord],
                messages: dict[str, list[MessageRecord]]) -> str:
        kind, run_id = group.key
        summary = group.commits[-1].message.splitlines()[0] if group.commits[-1].message else kind
        body: list[str] = []
        if run_id and kind in ("turn", "merge", "sub-agent", "fork"):
            msgs = messages.get(run_id, [])
            request = next((m.get("content") or "" for m in msgs if m["role"] == "user"), "")
            answer = next((m.get("content") or "" for m in reversed(msgs)
                           if m["role"] == "assistant" and m.get("content")), "")
            if request.strip():
                summary, _, rest = request.strip().partition("\n")
                if rest.strip():
                    body.append(rest.strip())
            if answer.strip():
                body.append(answer.strip().splitlines()[0][:200])
        lines = [summary[:72], ""]
        if body:
            lines += ["\n\n".join(body), ""]
        lines.append(f"Braid-Session: {self.session_id}")
        if run_id:
            lines.append(f"Braid-Run: {run_id}")
        return "\n".join(lines) + "\n"


def _groups(commits: list[pygit2.Commit]) -> list[Group]:
    """Turns' checkpoints together (a turn = its tool-batch and turn commits); every other
    commit (user edits, merges, forks, reverts) on its own."""
    out: list[Group] = []
    for commit in commits:
        kind, run_id = trailers_of(commit)
        key = ("turn" if kind in ("tool-batch", "turn") else kind or "unknown", run_id)
        if out and key[0] == "turn" and out[-1].key == key:
            out[-1].commits.append(commit)
        else:
            out.append(Group(key, [commit]))
    return out


def _source_moved(git: GitSession, before: pygit2.Commit | None,
                  after: pygit2.Commit) -> str | None:
    """The source commit an "Update from source" brought in (session.json's base_commit
    changed in it), else None."""
    def base(commit: pygit2.Commit | None) -> str | None:
        if commit is None:
            return None
        found = lookup.entry(commit.tree, "session.json")  # not `tree[name]`: it leaks
        try:
            meta = json.loads(lookup.blob_data(git.repo, found.id)) if found else None
        except (TypeError, ValueError):
            return None
        if meta is None:
            return None
        return (meta.get("source") or {}).get("base_commit")

    new = base(after)
    return new if new and new != base(before) else None


def import_root(git: GitSession, tip: pygit2.Commit) -> pygit2.Commit:
    commit = deque(first_parent_line(tip), maxlen=1)[0]  # the line's first commit
    if trailers_of(commit)[0] != "import":
        raise BadRequest("this session was not imported from a git repository")
    return commit


def pick_branch(src: pygit2.Repository, base_name: str, tip: pygit2.Oid) -> tuple[str, str]:
    """The branch to point at `tip`: `base_name` when new, equal, or a fast-forward; else the
    first `base_name-N` that is. Never the branch checked out in the source."""
    checked_out = None if src.head_is_unborn or src.head_is_detached else src.head.name
    n = 1
    while True:
        name = base_name if n == 1 else f"{base_name}-{n}"
        ref_name = f"refs/heads/{name}"
        ref = lookup.reference(src, ref_name)
        if ref_name != checked_out:
            if ref is None:
                return name, "created"
            if ref.target == tip:
                return name, "unchanged"
            if src.descendant_of(tip, ref.target):
                return name, "fast-forward"
        n += 1


def export_to_branch(git: GitSession, src: pygit2.Repository, meta: SessionMeta
                     ) -> BranchExport:
    head = git.head_commit()
    root = import_root(git, head)
    # The import's base, not the current one: an "Update from source" since then is replayed
    # as a merge of the commit it brought in.
    base_commit = (git.read_json(root, "session.json").get("source") or {}).get("base_commit")
    try:
        if not isinstance(base_commit, str):
            raise TypeError("no base commit")  # what pygit2.Oid(hex=None) raised
        base = src[pygit2.Oid(hex=base_commit)].peel(pygit2.Commit)
    except (KeyError, ValueError, TypeError) as e:
        raise BadRequest(f"the source no longer has the base commit {base_commit}") from e
    replay = Replay(git, src, meta["session_id"], {root.id: base.id})
    tip = replay.replay(head)
    name, how = pick_branch(src, f"braid/{slug(meta.get('title') or '', meta['session_id'])}",
                            tip)
    ref_name = f"refs/heads/{name}"
    old = lookup.reference(src, ref_name)
    if old is None:
        src.references.create(ref_name, tip)
    elif old.target != tip:
        old.set_target(tip, f"braid export {meta['session_id']}")
    commits = []
    walk: pygit2.Oid = tip
    while walk != base.id:
        commit = src[walk].peel(pygit2.Commit)
        commits.append(str(commit.id))
        if not commit.parents:
            break
        walk = commit.parent_ids[0]
    return {"branch": name, "commits": commits[::-1], "head": str(tip),
            "base_commit": str(base.id), "update": how}
