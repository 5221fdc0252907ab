"""to_json_bytes writes what json.dumps(indent=1, sort_keys=True, ensure_ascii=False) writes,
byte for byte (the records' text in git, as every Braid has written it), and leaves no
reference cycle behind."""

from __future__ import annotations

import gc
import json
import math
import random
from typing import Any

import pytest

from server.base.records import to_json_bytes

SAMPLES: list[Any] = [
    {}, [], "", 0, -1, 10**30, 1.5, -0.0, 1e-300, 1e300, 1e-4, 1e16, 5e-324, True,
    False, None, "é\u2028\x00\x7f\"\\/\n\t\U0001f600", {"b": 1, "a": [1, {"c": []}], "": {}},
    [[[[]]]], {"z": {"y": {"x": [None, True, 2.25]}}}, (1, 2), {"t": (3, [4])},
    {1: "int key"}, {2: "two", 1: "one"}, {None: 1}, [1, {"k": (1,)}], {"deep": [[[[[[1]]]]]]},
    {"€": 1, "e": 2, "é": 3, "\U0001f600": 4, "E": 5}, {"s": "  leading spaces\n  kept"},
]


def random_value(rnd: random.Random, depth: int = 0) -> Any:
    pick = rnd.randrange(9 if depth < 4 else 6)
    if pick == 0:
        return rnd.choice(["", "a", "é", "\x1f", "\ud800", "line\nnext", "q\"uote", "€", "  x"])
    if pick == 1:
        return rnd.randrange(-10**6, 10**6)
    if pick == 2:
        return rnd.uniform(-1e6, 1e6)
    if pick == 3:
        return rnd.choice([True, False, None])
    if pick in (4, 5):
        return rnd.choice(["x", 1, 0.5])
    if pick in (6, 7):
        return {rnd.choice(["a", "b", "é", "B", "a1", "_", ""]) + str(rnd.randrange(3)):
                random_value(rnd, depth + 1) for _ in range(rnd.randrange(5))}
    return [random_value(rnd, depth + 1) for _ in range(rnd.randrange(5))]


def reference(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def test_the_same_text_as_json_dumps() -> None:
    rnd = random.Random(11)
    values = SAMPLES + [random_value(rnd) for _ in range(3000)]
    for value in values:
        try:
            want = reference(value)
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text, refused by both
            with pytest.raises(UnicodeEncodeError):
                to_json_bytes(value)
            continue
        assert to_json_bytes(value) == want, value
    record = {"id": "m1", "role": "assistant", "content": "héllo", "tool_calls": []}
    assert to_json_bytes(record) == (json.dumps(record, indent=1, ensure_ascii=False,
                                                sort_keys=True) + "\n").encode()


def test_where_the_text_differs_it_reads_back_the_same() -> None:
    # Not JSON: NaN and the infinities are written as null (json.dumps wrote NaN, Infinity).
    assert to_json_bytes([math.nan, math.inf, -math.inf]) == b"[\n null,\n null,\n null\n]\n"
    # Small floats without an exponent: 1e-05 is written 0.00001, the same number.
    for value in (1e-5, 2.5e-5, 1e-7):
        assert json.loads(to_json_bytes(value)) == value


def test_no_reference_cycle_is_left() -> None:
    record = {"id": "m1", "content": "x" * 100, "tool_calls": [{"a": [1, 2, {"b": None}]}]}
    gc.collect()
    gc.disable()
    try:
        to_json_bytes(record)
        assert gc.collect() == 0
        json.dumps(record, indent=1, sort_keys=True)  # the standard library's does leave one
        assert gc.collect() > 0
    finally:
        gc.enable()
