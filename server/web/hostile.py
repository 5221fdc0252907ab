"""Hostile input at the transport (DESIGN §5): every JSON body and socket frame is parsed
here. Over-deep nesting, NUL characters and lone surrogates (in keys or values) are
`bad_request`, found before any handler sees the data; sizes are capped while reading."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from server.base.errors import BadRequest

MAX_DEPTH = 32
MAX_BODY = 2_000_000  # bytes of an HTTP JSON body, counted while it streams in


def loads(raw: str | bytes, what: str = "frame") -> Any:
    """`json.loads`, refusing what no client of ours sends."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRequest(f"the {what} is not valid UTF-8") from e
    try:
        data = json.loads(raw)
    except RecursionError as e:
        raise BadRequest(f"the {what} is nested too deeply (at most {MAX_DEPTH} levels)") from e
    except ValueError as e:
        raise BadRequest(f"malformed JSON {what}: {e}") from e
    check(data, what)
    return data


def check(data: Any, what: str = "frame") -> None:
    """Walk the parsed value once (iteratively: a hostile depth cannot overflow the stack)."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"the {what} is nested too deeply (at most {MAX_DEPTH} levels)")
        if isinstance(value, str):
            _check_text(value, where or what)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, f"a key of {where or what}")
                stack.append((item, depth + 1, key))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, where) for item in value)


def _check_text(text: str, where: str) -> None:
    if "\0" in text:
        raise BadRequest(f"{where} holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadRequest(f"{where} holds a lone surrogate (not valid Unicode)") from e


async def read_capped(chunks: AsyncIterator[bytes], declared: str | None,
                      limit: int = MAX_BODY) -> bytes:
    """The body, read while it streams in and refused as soon as it passes `limit` (a
    declared Content-Length over it is refused before reading at all)."""
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BadRequest(f"the body is larger than {limit} bytes")
        except ValueError as e:
            raise BadRequest("Content-Length is not a number") from e
    body = bytearray()
    async for chunk in chunks:
        body.extend(chunk)
        if len(body) > limit:
            raise BadRequest(f"the body is larger than {limit} bytes")
    return bytes(body)


def clean(text: str) -> bool:
    """Whether `text` holds neither NUL nor a lone surrogate."""
    try:
        _check_text(text, "text")
    except BadRequest:
        return False
    return True
