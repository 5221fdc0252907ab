"""The turn's view model: which controls a turn shows, from its record and whether it
streams (one rule in `turn_view.py`, read by the partials)."""

from __future__ import annotations

from typing import Any

from server.web.render.turn_view import resumed_by, turn_flags


def turn(status: str | None, *, streaming: bool = False, user: bool = True,
         files: bool = False, kind: str | None = None, budget: int | None = None,
         siblings: bool = False) -> dict[str, Any]:
    run: dict[str, Any] = {"status": status} if status is not None else {}
    if kind:
        run["kind"] = kind
    if budget:
        run["context"] = {"tokens": 10, "budget": budget}
    return {"type": "turn", "run_id": "r" * 32, "run": run, "streaming": streaming,
            "user": {"content": "hi"} if user else None,
            "files": [{"path": "a", "status": "added"}] if files else [],
            "siblings": {"position": 1, "count": 2} if siblings else None}


def test_a_streaming_or_running_turn_shows_no_controls() -> None:
    for t in (turn("RUNNING"), turn("COMPLETED", streaming=True)):
        f = turn_flags(t)
        assert not (f.settled or f.finished or f.can_edit or f.can_spawn or f.can_regenerate
                    or f.can_resume or f.show_files or f.show_nav)


def test_a_finished_turn_shows_its_controls() -> None:
    f = turn_flags(turn("COMPLETED", files=True, budget=32000))
    assert f.finished and f.can_edit and f.can_spawn and f.can_regenerate and f.show_nav
    assert f.show_files and f.show_context and not f.can_resume and not f.show_status


def test_only_error_and_interrupted_runs_resume() -> None:
    assert turn_flags(turn("ERROR")).can_resume and turn_flags(turn("ERROR")).show_status
    assert turn_flags(turn("INTERRUPTED")).can_resume
    assert not turn_flags(turn("CANCELLED")).can_resume
    assert turn_flags(turn("CANCELLED")).show_status


def test_a_run_resumed_at_the_end_resumes_no_more() -> None:
    """Its record names the run going on with it, or a live one does (`resumed_by`): its
    Resume is spent; its Regenerate and status stay."""
    committed = turn("INTERRUPTED")
    committed["run"]["resumed_by_run_id"] = "n" * 32
    live = [turn("ERROR"), {**turn("RUNNING", streaming=True), "run_id": "n" * 32}]
    resumed_by(live, "r" * 32, "n" * 32)
    for t in (committed, live[0]):
        f = turn_flags(t)
        assert not f.can_resume and f.can_regenerate and f.show_status and f.show_nav
    assert live[0]["run"]["resumed_by_run_id"] == "n" * 32
    assert "resumed_by_run_id" not in live[1]["run"]  # only the run named


def test_a_turn_without_a_status_or_user_message() -> None:
    f = turn_flags(turn(None, files=True))  # no record: its chips still show
    assert f.settled and f.show_files and not f.finished and not f.can_edit
    f = turn_flags(turn("COMPLETED", user=False))  # a note-like answer: no Regenerate
    assert f.can_edit and not f.can_regenerate and not f.show_nav
    assert turn_flags(turn("COMPLETED", user=False, siblings=True)).show_nav
    assert not turn_flags(turn("COMPLETED", kind="upload")).can_spawn
