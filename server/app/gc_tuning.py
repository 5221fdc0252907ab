"""The cyclic garbage collector tuned for a serving process (issue 9).

A turn allocates many container objects that die young by reference counting: the embedded
demo model parses each request (~2,300 messages, ~7,000 dicts and lists, at the default
context budget), the client builds its reply objects, the web layer its frames. With
CPython's default threshold (a young collection every 700 net allocations) a long
session's turn ran ~10 young and one middle collection over those still-live temporaries
(~4 ms a turn on this machine), and promoted them towards the old generation, whose full
collections walk the whole heap. A young threshold of 50,000 lets a request's objects die
by reference counting before any collection sees them; reference cycles (frames, futures,
pygit2 repositories) wait a little longer, and `memory.give_back_memory` still collects
everything once idle sessions are released. What start-up made (modules, classes, the
app) is frozen out of the collector's walks: it lives as long as the process.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def tune_for_serving() -> None:
    """Call once the server's code is imported, before it starts serving."""
    gc.collect()
    gc.freeze()  # start-up's objects: never garbage, no longer walked by full collections
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
