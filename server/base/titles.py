"""The one rule for a session's title (DESIGN §4 "Search and titles"): one printable line.

A title a person gives in a rename is refused when it holds a control character (ESC, NUL, a
newline), a format character (the bidi overrides that reverse what follows, zero-width ones:
the joiner inside emoji excepted), a line separator or a lone surrogate (`refusal`). A title
Braid makes (a first message's first line, an imported folder's name, a created session's)
has the same characters taken out (`plain`), so none reaches the page, a commit message or
`git log` in the session's repository.
"""

from __future__ import annotations

import unicodedata

MAX_TITLE = 120  # characters of any title
FIRST_LINE = 60  # characters of a title made from the first message
UNSHOWABLE = ("Cc", "Cs", "Cf", "Zl", "Zp")


def unshowable(ch: str) -> bool:
    return unicodedata.category(ch) in UNSHOWABLE and ch != "\u200d"


def refusal(text: str) -> str | None:
    """Why a person's title cannot be taken as it is (None: it can)."""
    return "must not contain control characters" if any(map(unshowable, text)) else None


def plain(text: str, limit: int = MAX_TITLE) -> str:
    """`text` as a title: what the rule refuses taken out (a tab or a line break becomes a
    space), spaces run together, at most `limit` characters."""
    kept = "".join(" " if ch.isspace() else ch for ch in text if ch.isspace()
                   or not unshowable(ch))
    return " ".join(kept.split())[:limit].rstrip()
