"""Sibling runs for the page's `‹ 2/3 ›` switcher: a run and every run forked from it, directly
or through other forks, are alternatives of one turn. Computed from the index's run rows
(`forked_from_run_id`, `branch`, `created_at`), so a render costs one query, not a git walk."""

from __future__ import annotations

from server.base.records import RunRef, RunRow, Siblings
from server.base.results import TranscriptItem


def _origin(run_id: str, by_id: dict[str, RunRow]) -> str:
    seen = {run_id}
    while True:
        parent = by_id[run_id].get("forked_from_run_id")
        if not parent or parent not in by_id or parent in seen:
            return run_id
        seen.add(parent)
        run_id = parent


def sibling_map(runs: list[RunRow]) -> dict[str, Siblings]:
    """run_id → {position, count, prev, next} for runs that have siblings; prev and next
    name the neighbour's run_id and the branch to check out to show it."""
    by_id = {r["run_id"]: r for r in runs}
    groups: dict[str, list[RunRow]] = {}
    for run in runs:
        groups.setdefault(_origin(run["run_id"], by_id), []).append(run)
    out: dict[str, Siblings] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda r: (r.get("created_at") or "", r["run_id"]))
        refs: list[RunRef] = [{"run_id": r["run_id"], "branch": r.get("branch")} for r in members]
        for i, run in enumerate(members):
            out[run["run_id"]] = {
                "position": i + 1, "count": len(members),
                "prev": refs[i - 1] if i > 0 else None,
                "next": refs[i + 1] if i + 1 < len(members) else None,
            }
    return out


def attach_siblings(turns: list[TranscriptItem], runs: list[RunRow]) -> None:
    siblings = sibling_map(runs)
    for turn in turns:
        if turn.get("type") == "turn":
            turn["siblings"] = siblings.get(turn.get("run_id") or "")
