"""The context budget (DESIGN §4): what of a branch's messages the model is sent.

The base system prompt, then the newest messages of the branch that fit BRAID_CONTEXT_TOKENS
(estimated: ~4 characters a token, plus a little per message), cut where no tool result is
separated from the assistant message that called it, and one system note saying how many
earlier messages were left out. Nothing is deleted: the full history stays in git. The cost
follows what is sent, not the length of the chat: the messages are walked from the newest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .model_memo import MEMO

CHARS_PER_TOKEN = 4
PER_MESSAGE = 4  # role and framing tokens of each message
CALL_OVERHEAD = 40  # a tool call's id, type and JSON framing, in characters


def estimate(msg: dict[str, Any]) -> int:
    chars = len(msg.get("content") or "")
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        chars += CALL_OVERHEAD + len(str(fn.get("name") or "")) + len(str(fn.get("arguments")
                                                                          or ""))
    return PER_MESSAGE + (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def cost(msg: dict[str, Any]) -> int:
    """`estimate`, made once per message (model_memo.py): every call re-walks the window."""
    kept = MEMO.of(msg)
    if kept.tokens is None:
        kept.tokens = estimate(msg)
    return kept.tokens


def note_text(omitted: int) -> str:
    word = "message" if omitted == 1 else "messages"
    return (f"Context budget: the {omitted} earliest {word} of this conversation "
            "are not shown here (the full history is kept in git).")


def fit(parts: Sequence[Sequence[dict[str, Any]]], budget: int, system_tokens: int
        ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The newest messages of `parts` (the branch's messages in order, as a few lists, so
    none is copied whole) that fit `budget` tokens with the system prompt, oldest first, and
    what the call uses: `{tokens, sent_messages, omitted_messages}`."""
    total = sum(len(p) for p in parts)
    used = system_tokens + estimate({"content": note_text(total)})
    kept: list[dict[str, Any]] = []
    last_user_seen = False
    for part in reversed(parts):
        for msg in reversed(part):
            tokens = cost(msg)
            # The newest user message always goes (the model must see what it answers).
            if used + tokens > budget and last_user_seen:
                break
            kept.append(msg)
            used += tokens
            last_user_seen = last_user_seen or msg.get("role") == "user"
        else:
            continue
        break
    kept.reverse()
    # A tool result whose call was cut off would be rejected by the model API.
    while kept and kept[0].get("role") == "tool":
        used -= cost(kept.pop(0))
    omitted = total - len(kept)
    if not omitted:
        used -= estimate({"content": note_text(total)})
    return kept, {"tokens": used, "sent_messages": len(kept), "omitted_messages": omitted}
