"""Typed records: what a message file, a run record and `session.json` hold (DESIGN §3).

Each is made here, in one place, and stored as the JSON object its `as_dict()` gives (keys
sorted on disk, so the files are the same as before); readers get those dicts back from
`layout.py`. `extra` carries the optional keys a kind of record adds (a tool call's
`tool_call_id`, a sub-agent's `sub_agent`, an upload's `kind`...), left out when None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.base.ids import new_message_id, now_iso


def to_json_bytes(obj: Any) -> bytes:
    """A record's text, byte for byte `json.dumps(obj, indent=1, sort_keys=True,
    ensure_ascii=False)` and a newline, by orjson (no reference cycle left, issue 11), its
    indent of two halved. Unlike json: NaN/Infinity are null, 1e-7..1e-4 floats unexponented."""
    try:
        out = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                           | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # keys that are not str, ints past 64 bits, surrogates
        return (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    if b"\n    " not in out:  # one level deep (no raw newline is inside a JSON string)
        return out.replace(b"\n  ", b"\n ")
    return b"\n".join([ln[(len(ln) - len(ln.lstrip(b" "))) >> 1:] for ln in out.split(b"\n")])


def _present(extra: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if v is not None}


@dataclass
class Message:
    """One file under history/: `{id, role, content, run_id, created_at, ...}`."""

    role: str
    content: str | None
    run_id: str | None
    id: str = field(default_factory=new_message_id)
    created_at: str = field(default_factory=now_iso)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "content": self.content,
                "run_id": self.run_id, "created_at": self.created_at, **_present(self.extra)}


@dataclass
class RunRecord:
    """One file under runs/: a run's status, lineage, model and usage."""

    run_id: str
    session_id: str
    branch: str
    status: str = "RUNNING"
    model: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = ""  # the creation time until the run changes
    forked_from_run_id: str | None = None
    forked_from_message_index: int | None = None
    regenerated_from: str | None = None
    error: str | None = None
    message_count: int = 0
    parent_run_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "session_id": self.session_id, "status": self.status,
            "branch": self.branch, "model": self.model, "usage": self.usage,
            "created_at": self.created_at, "updated_at": self.updated_at or self.created_at,
            "forked_from_run_id": self.forked_from_run_id,
            "forked_from_message_index": self.forked_from_message_index,
            "regenerated_from": self.regenerated_from, "error": self.error,
            "message_count": self.message_count, "parent_run_id": self.parent_run_id,
            **self.extra,
        }


@dataclass
class SessionMeta:
    """`session.json`: who owns the session and where it comes from."""

    session_id: str
    title: str
    user_id: str
    forked_from_session_id: str | None = None
    root_session_id: str | None = None  # a root session's is its own id
    created_at: str = field(default_factory=now_iso)
    extra: dict[str, Any] = field(default_factory=dict)  # model?, archived?, source?, import?

    def as_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "title": self.title, "user_id": self.user_id,
                "created_at": self.created_at,
                "forked_from_session_id": self.forked_from_session_id,
                "root_session_id": self.root_session_id or self.session_id, **self.extra}
