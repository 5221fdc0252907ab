"""jsontext.dumps writes what json.dumps(indent=1, sort_keys=True) writes, byte for byte (the
records' format in git is a contract), and leaves no reference cycle behind."""

from __future__ import annotations

import gc
import json
import math
import random
from typing import Any

from server.core import jsontext
from server.core.git_session import to_json_bytes

SAMPLES: list[Any] = [
    {}, [], "", 0, -1, 10**30, 1.5, -0.0, 1e-300, 1e300, math.nan, math.inf, -math.inf, True,
    False, None, "é\u2028\x00\"\\/\n\t\U0001f600", {"b": 1, "a": [1, {"c": []}], "": {}},
    [[[[]]]], {"z": {"y": {"x": [None, True, 2.25]}}}, (1, 2), {"t": (3, [4])},
    {1: "int key"}, {2: "two", 1: "one"}, {None: 1}, [1, {"k": (1,)}],
]


def random_value(rnd: random.Random, depth: int = 0) -> Any:
    pick = rnd.randrange(9 if depth < 4 else 6)
    if pick == 0:
        return rnd.choice(["", "a", "é", "\x1f", "\ud800", "line\nnext", "q\"uote", "€"])
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


def test_the_same_text_as_json_dumps() -> None:
    rnd = random.Random(11)
    values = SAMPLES + [random_value(rnd) for _ in range(3000)]
    for value in values:
        for ascii_only in (True, False):
            want = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=ascii_only)
            assert jsontext.dumps(value, ensure_ascii=ascii_only) == want, value
    record = {"id": "m1", "role": "assistant", "content": "héllo", "tool_calls": []}
    assert to_json_bytes(record) == (json.dumps(record, indent=1, ensure_ascii=False,
                                                sort_keys=True) + "\n").encode()


def test_no_reference_cycle_is_left() -> None:
    record = {"id": "m1", "content": "x" * 100, "tool_calls": [{"a": [1, 2, {"b": None}]}]}
    gc.collect()
    gc.disable()
    try:
        jsontext.dumps(record)
        to_json_bytes(record)
        assert gc.collect() == 0
        json.dumps(record, indent=1, sort_keys=True)  # the standard library's does leave one
        assert gc.collect() > 0
    finally:
        gc.enable()
