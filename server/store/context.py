"""The context budget (DESIGN §4): what of a branch's messages the model is sent.

The base system prompt, then the newest messages of the branch that fit BRAID_CONTEXT_TOKENS
(estimated: ~4 characters a token, plus a little per message), cut where no tool result is
separated from the assistant message that called it, and one system note saying how many
earlier messages were left out. Nothing is deleted: the full history stays in git. The cost
follows what is sent, not the length of the chat: the messages are walked from the newest.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import chain

from server.base.memo import IdentityMemo
from server.base.records import ContextUse, MessageRecord

CHARS_PER_TOKEN = 4
PER_MESSAGE = 4  # role and framing tokens of each message
CALL_OVERHEAD = 40  # a tool call's id, type and JSON framing, in characters


def text_cost(text: str) -> int:
    """What a message holding only `text` costs (the system prompt, the budget's note)."""
    return PER_MESSAGE + (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate(msg: MessageRecord) -> int:
    chars = len(msg.get("content") or "")
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        chars += CALL_OVERHEAD + len(str(fn.get("name") or "")) + len(str(fn.get("arguments")
                                                                          or ""))
    return PER_MESSAGE + (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


COSTS: IdentityMemo[int] = IdentityMemo(estimate)
cost = COSTS.get  # `estimate`, made once per message (base/memo.py)


def note_text(omitted: int) -> str:
    word = "message" if omitted == 1 else "messages"
    return (f"Context budget: the {omitted} earliest {word} of this conversation "
            "are not shown here (the full history is kept in git).")


def fit(parts: Sequence[Sequence[MessageRecord]], budget: int, system_tokens: int,
        sums: Sequence[int] | None = None) -> tuple[list[MessageRecord], ContextUse]:
    """The newest messages of `parts` (the branch's messages in order, as a few lists, so
    none is copied whole) that fit `budget` tokens with the system prompt, oldest first, and
    what the call uses: `{tokens, sent_messages, omitted_messages}`. With `sums`, the running
    totals of the first part's estimates (`[0, c0, c0+c1, ...]`, layout.message_sums), that
    part is cut by bisection: the cost follows the turn's new messages, not the window."""
    total = sum(len(p) for p in parts)
    state = _Fit(budget, system_tokens + text_cost(note_text(total)))
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        usable = sums is not None and i == 0 and len(sums) == len(part) + 1
        end = state.walk(part, stop_at_user=usable)
        if usable and sums is not None and not state.full and end > 0:
            end = state.bisect(part, sums, end)
        if state.full or end > 0:
            break
    kept = list(chain.from_iterable(reversed(state.chunks)))
    # A tool result whose call was cut off would be rejected by the model API.
    drop = 0
    while drop < len(kept) and kept[drop].get("role") == "tool":
        state.used -= cost(kept[drop])
        drop += 1
    kept = kept[drop:]
    omitted = total - len(kept)
    if not omitted:
        state.used -= text_cost(note_text(total))
    return kept, {"tokens": state.used, "sent_messages": len(kept), "omitted_messages": omitted}


class _Fit:
    """The walk from the newest message: what is kept (chunks, newest first), the tokens."""

    def __init__(self, budget: int, used: int) -> None:
        self.budget, self.used = budget, used
        self.chunks: list[Sequence[MessageRecord]] = []
        self.last_user_seen = False
        self.full = False

    def walk(self, part: Sequence[MessageRecord], stop_at_user: bool) -> int:
        """Keep `part`'s messages from its end while they fit (the newest user message
        always goes: the model must see what it answers); `stop_at_user`: only until the
        newest user message is kept. Returns where it stopped (0: the whole part kept)."""
        end = len(part)
        while end > 0 and not (stop_at_user and self.last_user_seen):
            msg = part[end - 1]
            tokens = cost(msg)
            if self.used + tokens > self.budget and self.last_user_seen:
                self.full = True
                break
            self.used += tokens
            self.last_user_seen = self.last_user_seen or msg.get("role") == "user"
            end -= 1
        self.chunks.append(part[end:])
        return end

    def bisect(self, part: Sequence[MessageRecord], sums: Sequence[int], end: int) -> int:
        """Keep the longest run of messages ending at `end` that fits what is left."""
        room = self.budget - self.used
        start = bisect_left(sums, sums[end] - room, 0, end)
        self.used += sums[end] - sums[start]
        self.chunks.append(part[start:end])
        self.full = start > 0
        return start
