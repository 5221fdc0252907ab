"""`dumps`: the JSON text `json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=...)` makes,
byte for byte, without the garbage it leaves (issue 11).

With an indent, the standard library encodes in Python (its C encoder has no indentation
before 3.13) through closures that call each other: every call leaves a reference cycle
(~30 objects) that only the cyclic GC frees. A turn writes about eight records, and a serving
process runs that collector rarely (gc_tuning.py), so after a burst of turns the cycles'
memory had spread over the heap. This module-level recursion leaves none. Anything but
plain JSON values (dicts with str keys, lists, str, int, float, bool, None; tuples and
subclasses included) goes to `json.dumps`, which is the reference.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any


class _NotPlain(Exception):
    pass


def dumps(obj: Any, *, ensure_ascii: bool = True) -> str:
    """`json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=ensure_ascii)`."""
    parts: list[str] = []
    try:
        _encode(obj, parts, 0, encode_basestring_ascii if ensure_ascii else encode_basestring)
    except (_NotPlain, RecursionError):
        return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=ensure_ascii)
    return "".join(parts)


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == -float("inf"):
        return "-Infinity"
    return float.__repr__(value)


def _encode(obj: Any, out: list[str], level: int, text: Any) -> None:
    kind = type(obj)
    if kind is str:
        out.append(text(obj))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(obj))
    elif kind is float:
        out.append(_float(obj))
    elif kind is dict:
        _encode_dict(obj, out, level, text)
    elif kind is list:
        _encode_list(obj, out, level, text)
    else:
        raise _NotPlain  # tuples, subclasses, anything with a default: json.dumps


def _encode_dict(obj: dict[Any, Any], out: list[str], level: int, text: Any) -> None:
    if not obj:
        out.append("{}")
        return
    if any(type(key) is not str for key in obj):
        raise _NotPlain  # json's key conversions: left to it
    inner = "\n" + " " * (level + 1)
    out.append("{")
    for i, (key, value) in enumerate(sorted(obj.items(), key=_first)):
        out.append(inner if i == 0 else "," + inner)
        out.append(text(key))
        out.append(": ")
        _encode(value, out, level + 1, text)
    out.append("\n" + " " * level + "}")


def _encode_list(obj: list[Any], out: list[str], level: int, text: Any) -> None:
    if not obj:
        out.append("[]")
        return
    inner = "\n" + " " * (level + 1)
    out.append("[")
    for i, value in enumerate(obj):
        out.append(inner if i == 0 else "," + inner)
        _encode(value, out, level + 1, text)
    out.append("\n" + " " * level + "]")


def _first(item: tuple[str, Any]) -> str:
    return item[0]
