"""Readable names (web/render/names.py): the names of a session are kept between renders and
moved on by the runs made since, with the same answers as names made from every run afresh;
edits named by their turn; a merge note shown without the model's instructions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.features.merge import ANSWER_LINE, MARKERS_LINE
from server.store.index import Index
from server.web.render.names import Names, humanize, names_of, note_for_people


def run(run_id: str, at: str, **extra: Any) -> dict[str, Any]:
    return {"run_id": run_id, "status": "COMPLETED", "branch": "main",
            "created_at": f"2026-01-01T00:00:{at}Z", **extra}


async def test_kept_names_follow_new_runs_and_match_names_made_afresh(tmp_path: Path) -> None:
    index = Index(tmp_path / "index.sqlite3")
    await index.open()
    try:
        await index.upsert_session({"session_id": "s", "user_id": "local", "title": "",
                                    "created_at": "2026-01-01T00:00:00Z"})
        for i in range(3):
            await index.upsert_run("s", run(f"r{i}", f"0{i}.000"))
        first = await names_of(index, "s")
        assert first.run("r2") == "turn 3"
        await index.upsert_run("s", run("r3", "03.000", forked_from_run_id="r1",
                                        forked_from_message_index=2, branch="run/r3"))
        await index.upsert_run("s", run("r4", "04.000", branch="sub_r3_alpha_0123abcd"))
        kept = await names_of(index, "s")
        assert kept is first  # moved on, not made again
        fresh = Names(await index.list_runs("s"))
        assert kept.turn_no == fresh.turn_no and kept.branch_names == fresh.branch_names
        assert kept.run("r3") == "turn 4" and kept.branch("run/r3") == "Fork of turn 2 at message 3"
        assert kept.run("r4") is None  # a sub-agent's run is not a turn of the chat
        # A run dated before the newest one named (a clock set back): made afresh, in order.
        await index.upsert_run("s", run("r0b", "00.500"))
        again = await names_of(index, "s")
        assert again is not first
        assert again.turn_no == Names(await index.list_runs("s")).turn_no
        assert again.run("r0b") == "turn 2" and again.run("r3") == "turn 5"
    finally:
        await index.close()


def test_edits_and_forks_are_named_by_the_turn_they_come_from() -> None:
    runs = [{"run_id": f"r{i}", "created_at": f"0{i}", "branch": "main"} for i in range(3)]
    runs += [{"run_id": "e", "created_at": "05", "branch": "run/e", "forked_from_run_id": "r1",
              "forked_from_message_index": 0},
             {"run_id": "f", "created_at": "06", "branch": "run/f", "forked_from_run_id": "r1",
              "forked_from_message_index": 0},
             {"run_id": "g", "created_at": "07", "branch": "run/g", "forked_from_run_id": "r2",
              "forked_from_message_index": 4}]
    names = Names(runs)
    assert names.branch("run/e") == "Edit of turn 2"  # the second message, not "message 1"
    assert names.branch("run/f") == "Edit of turn 2 (2)"
    assert names.branch("run/g") == "Fork of turn 3 at message 5"


def test_a_merge_note_shows_people_what_was_merged_not_the_models_instructions() -> None:
    note = ("Merge turn: 2 branches merged into main (on conflict: agent). What each brought:\n"
            f"- sub_0123456789_red_0123abcd: red\nConflicts:\n- a.txt\n{MARKERS_LINE}\n"
            f"{ANSWER_LINE}")
    shown = note_for_people(note)
    assert shown.splitlines() == [
        "2 branches merged into main (on conflict: agent). What each brought:",
        "- sub_0123456789_red_0123abcd: red", "Conflicts:", "- a.txt"]
    assert "sub-agent red" in str(humanize(shown))
    assert note_for_people("Turn abc was reverted") == "Turn abc was reverted"
