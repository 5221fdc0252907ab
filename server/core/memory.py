"""Memory the process gives back when quiet (issue 11, D14/D15).

glibc's malloc keeps freed heap pages for reuse and gives every thread that contends for the
heap an arena of its own (up to eight per core): after a burst of 200 sessions, each with its
thread, RSS stays near its peak though the objects are gone. Two arenas bound that
fragmentation (the advice servers such as gunicorn give, as MALLOC_ARENA_MAX=2), and a trim
once the sessions are released returns the free pages. Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h
ARENAS = 2


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both or neither: glibc
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def limit_arenas(arenas: int = ARENAS) -> None:
    """Bound the malloc arenas; call early, before the session threads start."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, arenas)


def give_back_memory() -> None:
    """Return free heap pages to the system (after idle sessions were released).

    First a full collection: what a burst of sessions leaves in reference cycles (their
    `pygit2.Repository` objects, the turns' frames and futures) would else wait for the
    oldest generation's rare turn, holding the C memory behind it."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
