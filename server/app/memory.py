"""Memory the process gives back when quiet (issue 11, D14/D15).

After a burst (200 sessions at once, say) the objects are gone but RSS stays near its peak:
what survives the burst (a few KB here and there) pins the memory around it. Three things
keep that small:

- **The serving process allocates with glibc's malloc** (`PYTHONMALLOC=malloc`). The
  allocator is chosen when the interpreter starts, so it is a deployment setting, not the
  server's: `scripts/run` sets it (`SERVER_ENV`), and docs/deployment.md "Memory" says to.
  (It used to re-execute itself to set it; a process that replaces itself surprises
  supervisors and debuggers, and the setting belongs with the others.) Python's own
  small-object allocator returns
  memory only by whole 1 MiB arenas, and one live object keeps its arena: after the burst
  26 arenas stayed, with live data 0.6 MB above the start. glibc's `malloc_trim` returns
  every free 4 KiB page, wherever it is. Measured side by side with bench/load.py (200
  sockets x 3 turns): idle/start RSS 1.37 with pymalloc, 1.10 with malloc.
- **Two malloc arenas** (the advice servers such as gunicorn give, as MALLOC_ARENA_MAX=2):
  else every thread that contends for the heap gets one, each fragmented on its own.
- **When quiet, the survivors go and the pages are given back** (`give_back_memory`): a full
  collection, then `malloc_trim`.

Elsewhere than glibc the malloc settings do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h
ARENAS = 2
# What scripts/run sets for `braid serve` (tests and benches start servers with it too).
# The mark says the PYTHONMALLOC is the server's, not the user's: the commands the server
# starts (the shell tool's) get the user's own allocator.
SERVER_MARK = "BRAID_SERVER_MALLOC"
SERVER_ENV = {"PYTHONMALLOC": "malloc", SERVER_MARK: "1"}


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both or neither: glibc
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def keep_allocator_to_self() -> None:
    """The interpreter has chosen its allocator; when the PYTHONMALLOC it started with is
    the server's (`SERVER_MARK`), take it out of the environment the server's commands
    inherit. A PYTHONMALLOC the user set alone is left for them."""
    if os.environ.pop(SERVER_MARK, None) is not None:
        os.environ.pop("PYTHONMALLOC", None)


def limit_arenas(arenas: int = ARENAS) -> None:
    """Bound the malloc arenas; call early, before the session threads start."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, arenas)


def give_back_memory() -> None:
    """Return free heap pages to the system (after idle sessions were released).

    First a full collection: what a burst of sessions leaves in reference cycles (their
    `pygit2.Repository` objects, the turns' frames and futures) would else wait for the
    oldest generation's rare turn, holding the C memory behind it. (The type attribute
    cache is left alone: emptying it freed ~100 KB after a 30-turn burst, most of it names
    Jinja2 made once; its 4,096 entries bound what it can hold.)"""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
