"""The context budget (DESIGN §4): what of a branch's messages the model is sent.

The base system prompt, then the newest messages of the branch that fit BRAID_CONTEXT_TOKENS
(estimated: ~4 characters a token, plus a little per message), cut where no tool result is
separated from the assistant message that called it, and one system note saying how many
earlier messages were left out. Nothing is deleted: the full history stays in git. The cost
follows what is sent, not the length of the chat: the messages are walked from the newest.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain

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


# -- masking and the summary (DESIGN §4 "Compaction") ------------------------------------------
# When a branch's messages no longer fit, old tool results are sent masked first (the call
# kept, its output replaced by a marker), the newest whole; when that is not enough, the
# model summarizes the oldest part (agent/compaction/run.py) and the summary is sent in place of
# the runs it covers. Every figure comes from running totals kept with the branch's listing
# (layout.message_sums), so a call costs what the turn added, not the length of the chat.

SUMMARY_HEAD = "Summary of the earlier conversation: "
SUMMARIZE_ASK = ("Summarize the conversation so far: what the user asked for, what was decided "
                 "and done (files changed, commands run, results), and what is still open. "
                 "Be concise; keep names, paths and numbers exact.")
COMPACTION = "compaction"  # a compaction run's kind, and its message's
WHOLE_SHARE = 2  # the newest messages are sent whole within 1/WHOLE_SHARE of the room
USER_LOOKBACK = 10_000  # messages walked back to find the newest user message


def mask_marker(msg: MessageRecord) -> str:
    return f"[output omitted: {len((msg.get('content') or '').encode())} bytes]"


def masked_estimate(msg: MessageRecord) -> int:
    """What a message costs when old tool output is masked: a tool result's marker."""
    whole = cost(msg)
    if msg.get("role") != "tool":
        return whole
    return min(whole, text_cost(mask_marker(msg)))


MASKED_COSTS: IdentityMemo[int] = IdentityMemo(masked_estimate)


def is_maskable(msg: MessageRecord) -> int:
    """1 when masking the message makes it cheaper (a tool result longer than its marker)."""
    return int(MASKED_COSTS.get(msg) < cost(msg))


MASKABLE: IdentityMemo[int] = IdentityMemo(is_maskable)


def is_compaction(msg: MessageRecord) -> bool:
    return msg.get("kind") == COMPACTION and msg.get("role") == "system"


@dataclass(frozen=True)
class Sums:
    """Running totals over a list of messages (`[0, c0, c0+c1, ...]`): whole estimates,
    masked estimates, and how many are maskable."""

    full: Sequence[int]
    masked: Sequence[int]
    maskable: Sequence[int]


def _running(values: Iterable[int]) -> list[int]:
    return list(accumulate(values, initial=0))


def sums_of(msgs: Sequence[MessageRecord]) -> Sums:
    """The totals of `msgs`, made here (a turn's own messages; a branch without a listing)."""
    return Sums(_running(COSTS.many(msgs)), _running(MASKED_COSTS.many(msgs)),
                _running(MASKABLE.many(msgs)))


@dataclass(frozen=True)
class Span:
    """A part of a list of messages, `msgs[lo:hi]`, with the list's running totals."""

    msgs: Sequence[MessageRecord]
    lo: int
    hi: int
    sums: Sums


class Window:
    """The messages the model may be sent, as a few spans in order (the branch's messages
    after a summary, the turn's own), read through their running totals."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = [s for s in spans if s.hi > s.lo]
        self.starts: list[int] = []
        n = 0
        for span in self.spans:
            self.starts.append(n)
            n += span.hi - span.lo
        self.n = n

    def _locate(self, i: int) -> tuple[int, int]:
        k = max(0, bisect_right(self.starts, i) - 1)
        return k, i - self.starts[k] if self.spans else 0

    def total(self, which: str, i: int) -> int:
        """The `which` (full, masked, maskable) total of the first `i` messages."""
        out = 0
        for k, span in enumerate(self.spans):
            sums: Sequence[int] = getattr(span.sums, which)
            take = min(i - self.starts[k], span.hi - span.lo)
            if take <= 0:
                break
            out += sums[span.lo + take] - sums[span.lo]
        return out

    def lowest(self, which: str, end: int, room: int) -> int:
        """The smallest i ≤ end whose messages i..end cost at most `room`."""
        top = self.total(which, end)
        lo, hi = 0, end
        while lo < hi:
            mid = (lo + hi) // 2
            if top - self.total(which, mid) <= room:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def at(self, i: int) -> MessageRecord:
        k, off = self._locate(i)
        span = self.spans[k]
        return span.msgs[span.lo + off]

    def slice(self, a: int, b: int) -> list[MessageRecord]:
        out: list[MessageRecord] = []
        for k, span in enumerate(self.spans):
            s0 = self.starts[k]
            lo, hi = max(a, s0), min(b, s0 + span.hi - span.lo)
            if lo < hi:
                out.extend(span.msgs[span.lo + lo - s0:span.lo + hi - s0])
        return out

    def newest_user(self) -> int | None:
        for i in range(self.n - 1, max(-1, self.n - 1 - USER_LOOKBACK), -1):
            if self.at(i).get("role") == "user":
                return i
        return None


@dataclass
class Fitted:
    """What a call is sent of a window: the older part masked, the newest part whole."""

    masked: list[MessageRecord]
    whole: list[MessageRecord]
    tokens: int
    omitted: int
    masked_count: int


def fit_window(win: Window, room: int) -> Fitted:
    """All of `win` whole when it fits `room` tokens; else the newest whole within half the
    room, older tool results masked, and the oldest left out if even that does not fit
    (the newest user message always goes; no tool result without its call)."""
    n = win.n
    full = win.total("full", n)
    if full <= room:
        return Fitted([], win.slice(0, n), full, 0, 0)
    w = win.lowest("full", n, room // WHOLE_SHARE)
    whole_cost = full - win.total("full", w)
    m = win.lowest("masked", w, room - whole_cost) if room > whole_cost else w
    user = win.newest_user()
    if user is not None and user < m:
        m = user
    while m < n and win.at(m).get("role") == "tool":
        m += 1
    w = max(w, m)
    tokens = full - win.total("full", w) + win.total("masked", w) - win.total("masked", m)
    masked = win.total("maskable", w) - win.total("maskable", m)
    return Fitted(win.slice(m, w), win.slice(w, n), tokens, m, masked)


# The newest compaction message of a list, remembered by the list's last message (a
# branch's messages only grow at their end; a message at index k of two lists means the same
# k messages before it): finding it costs the messages added since, not the chat.
_NEWEST: dict[int, tuple[MessageRecord, int, int]] = {}
_NEWEST_KEPT = 4096


def newest_compaction(msgs: Sequence[MessageRecord]) -> int:
    """The index of the newest compaction message of `msgs`, or -1."""
    found, i = -1, len(msgs)
    while i > 0:
        msg = msgs[i - 1]
        if is_compaction(msg):
            found = i - 1
            break
        hit = _NEWEST.get(id(msg))
        if hit is not None and hit[0] is msg and hit[1] == i:
            found = hit[2]
            break
        i -= 1
    if msgs:
        if len(_NEWEST) >= _NEWEST_KEPT:
            _NEWEST.clear()
        _NEWEST[id(msgs[-1])] = (msgs[-1], len(msgs), found)
    return found


def covered_until(msg: MessageRecord) -> int:
    """How many of the branch's first messages a compaction message's summary covers."""
    covers = msg.get("covers")
    return int(covers["until"]) if covers else 0


def branch_spans(prior: Sequence[MessageRecord], sums: Sums
                 ) -> tuple[MessageRecord | None, list[Span]]:
    """The newest summary of a branch's messages (None: none), and the spans sent after
    it: the messages it does not cover, less the summary itself."""
    at = newest_compaction(prior)
    if at < 0:
        return None, [Span(prior, 0, len(prior), sums)]
    summary = prior[at]
    until = min(covered_until(summary), at)
    return summary, [Span(prior, until, at, sums), Span(prior, at + 1, len(prior), sums)]


SUMMARY_SHARE = 4  # a summary is sent at most 1/SUMMARY_SHARE of the budget


def summary_text(msg: MessageRecord, budget: int | None = None) -> str:
    """The system message a summary is sent as: at most a quarter of `budget` tokens (the
    rest cut with a note), so a summary that grew with each compaction never crowds out
    the turns it precedes."""
    text = msg.get("content") or ""
    if budget is not None and len(text) > budget // SUMMARY_SHARE * CHARS_PER_TOKEN:
        keep = budget // SUMMARY_SHARE * CHARS_PER_TOKEN
        text = text[:keep] + f" [summary cut: {len(text) - keep:,} more characters in git]"
    return SUMMARY_HEAD + text


def run_start_after(msgs: Sequence[MessageRecord], i: int) -> int:
    """The first index ≥ i where a run begins (or len): a boundary no call is cut from."""
    n = len(msgs)
    if i <= 0 or i >= n:
        return max(0, min(i, n))
    run = msgs[i - 1].get("run_id")
    while i < n and msgs[i].get("run_id") == run:
        i += 1
    return i
