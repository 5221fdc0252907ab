"""The request body of a model call, as bytes, with each message's JSON made once.

A long session's calls send the same few thousand messages again and again (the context
window moves by what a turn added); encoding the whole list on every call cost more than
everything else Braid does for a turn. Each shaped message (model_messages.shaped, shared
between calls) is encoded once and kept (base/memo.py); a body is its other fields encoded
as usual with the kept texts joined in. The bytes are what `json.dumps` of the whole body
would give, in the form the openai client sends (`ensure_ascii=False`, compact separators).
"""

from __future__ import annotations

import json
from typing import Any

from server.base.memo import IdentityMemo
from server.base.records import ModelMessage


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode()


ENCODED: IdentityMemo[bytes] = IdentityMemo(_dumps)
encoded = ENCODED.get  # one message's JSON, made once per message object


def body(fields: dict[str, Any], messages: list[ModelMessage]) -> bytes:
    """`fields` plus `"messages": messages` as one JSON object."""
    head = _dumps(fields)
    parts = b",".join(ENCODED.many(messages))
    sep = b"," if len(head) > 2 else b""
    return head[:-1] + sep + b'"messages":[' + parts + b"]}"
