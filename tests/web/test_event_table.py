"""One event protocol: every event of results.EventName has one constructor in base/events.py
and one row in web/render/frames.RENDERINGS; nothing in server/ publishes by a bare name; the
frames keep DESIGN §5's shape."""

from __future__ import annotations

import ast
import inspect
import json
import typing
from pathlib import Path

from server.base import events
from server.base.records import RunRecord
from server.base.results import EventFrame, EventName
from server.web.render.frames import RENDERINGS

ROOT = Path(__file__).resolve().parents[2]
NAMES = set(typing.get_args(EventName))


def _names_made_by(fn: object) -> set[str]:
    """The event names a constructor's return annotation allows (Event[Literal[...]])."""
    hints = typing.get_type_hints(fn, vars(events))
    (literal,) = typing.get_args(hints["return"])
    return set(typing.get_args(literal))


def test_every_event_has_one_constructor_and_one_rendering() -> None:
    made: dict[str, str] = {}
    for name, fn in inspect.getmembers(events, inspect.isfunction):
        if fn.__module__ != events.__name__ or name.startswith("_"):
            continue
        for event in _names_made_by(fn):
            assert event not in made, f"{event} made by {made[event]} and {name}"
            made[event] = name
    assert set(made) == NAMES
    assert set(RENDERINGS) == NAMES
    assert events.EVENTS == NAMES
    # The shell's output (DESIGN §5 `tool_output {run_id, call_id, text}`) is an event too.
    assert "tool_output" in NAMES


def test_nothing_publishes_an_event_by_a_bare_name() -> None:
    found = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "publish" \
                    and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                            for a in node.args):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found
    params = list(inspect.signature(events.EventBus.publish).parameters)
    assert params == ["self", "session_id", "event"]


def test_frames_keep_the_wire_format_of_design_5() -> None:
    frame = events.message_delta("r1", "m1", "Hi").frame("s1")
    assert frame == {"type": "event", "event": "message_delta",
                     "data": {"session_id": "s1", "run_id": "r1", "message_id": "m1",
                              "delta": "Hi"}}
    tagged = events.message_delta("r1", "m1", "Hi", branch="sub_x_0").frame("s1")
    assert tagged["data"]["branch"] == "sub_x_0"
    out = events.tool_output("r1", "c1", "line\n").frame("s1")
    assert out["data"] == {"session_id": "s1", "run_id": "r1", "call_id": "c1", "text": "line\n"}
    run = typing.cast(RunRecord, {"run_id": "r1"})
    ended = events.run_ended("ERROR", "r1", run, [], error="boom")
    assert ended.name == "run_error" and ended.data["error"] == "boom"
    assert events.run_ended("COMPLETED", "r1", run, []).name == "run_completed"
    assert events.run_ended("INTERRUPTED", "r1", run, []).name == "run_cancelled"
    assert events.dag_changed().data == {}
    assert events.checkpoint("r1", "c" * 40, "turn").data == {
        "run_id": "r1", "commit_id": "c" * 40, "kind": "turn"}
    for name, row in RENDERINGS.items():  # a script gets the frame as published
        sent: EventFrame = {"type": "event", "event": name, "data": {"session_id": "s1"}}
        assert json.loads(row.json(sent)) == sent
