"""Which files under `workdir/` may have changed since the last look: a file-system watcher
(`watchfiles`, inotify on Linux) per open session, so finding user edits and shell changes
costs O(changed files), not O(files in the workdir) (DESIGN §1 principle 3).

The watcher only names candidates; `WorkdirScan.changed_paths` compares each with HEAD.
A look first writes a marker file into `.git/braid-watch/` (watched too, invisible to git)
and waits until its event comes back: events reach us in order, so every change made before
the look has been seen by then. Without a watcher (too many open sessions, the system's
limit reached, a marker that never came back, a name that is not UTF-8, which watchfiles
cannot decode) the caller falls back on a full scan, as it does on a watcher's first look.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger("braid.watch")

# inotify instances are a per-user system limit (often 128), and each watcher's thread wakes
# every STEP_MS: a few are kept, for the sessions used most recently.
MAX_WATCHERS = 8
SYNC_TIMEOUT = 2.0
# So many events at once that the kernel's queue may have dropped some: scan instead.
FLOOD = 20_000
MARKERS = "braid-watch"
STEP_MS = 1


class Watcher:
    def __init__(self, workdir: Path, git_dir: Path) -> None:
        from watchfiles._rust_notify import RustNotify

        self.workdir = str(workdir)
        # A workdir folder removed and made again (a checkout of an empty tree) loses its watch.
        self._inode = os.stat(workdir).st_ino
        self.markers = git_dir / MARKERS
        self.markers.mkdir(exist_ok=True)
        for stale in self.markers.iterdir():
            stale.unlink(missing_ok=True)
        self._notify = RustNotify([self.workdir, str(self.markers)], False, False, 0, True, True)
        self._lock = threading.Condition()
        self._changed: set[str] = set()
        self._seen: set[str] = set()
        self._flooded = False
        self._stop = threading.Event()
        self._counter = itertools.count()
        self.closed = False
        self._thread = threading.Thread(target=self._loop, name="braid-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        prefix = self.workdir + os.sep
        try:
            while not self._stop.is_set():
                changes = self._notify.watch(50, STEP_MS, 1000, self._stop)
                if not isinstance(changes, set):
                    continue
                with self._lock:
                    for _, path in changes:
                        if path.startswith(prefix):
                            self._changed.add(path[len(prefix):])
                        elif os.path.dirname(path) == str(self.markers):
                            self._seen.add(os.path.basename(path))
                    if len(self._changed) > FLOOD:
                        self._flooded = True
                        self._changed.clear()
                    self._lock.notify_all()
        except Exception as e:  # noqa: BLE001 - a broken watcher only means full scans
            if "decode path" in str(e):
                # watchfiles gives up for good on a name that is not UTF-8 (it raises on
                # every later call): this watcher ends, the next look scans everything
                # (git status handles such names) and opens a new one.
                log.info("file watcher of %s stopped: %s", self.workdir, e)
            else:
                log.exception("file watcher stopped")
        finally:
            self.closed = True
            self._notify.close()
            with self._lock:
                self._lock.notify_all()

    def take(self) -> set[str] | None:
        """The workdir-relative paths changed since the last take, or None when they are not
        known (the caller scans everything)."""
        if self.closed:
            return None
        try:
            if os.stat(self.workdir).st_ino != self._inode:
                self.close()
                return None
        except FileNotFoundError:
            self.close()
            return None
        name = f"sync-{next(self._counter)}"
        marker = self.markers / name
        marker.write_bytes(b"")
        try:
            with self._lock:
                if not self._lock.wait_for(lambda: name in self._seen or self.closed,
                                           SYNC_TIMEOUT) or self.closed:
                    return None
                self._seen.clear()
                changed, self._changed = self._changed, set()
                flooded, self._flooded = self._flooded, False
        finally:
            marker.unlink(missing_ok=True)
        return None if flooded else changed

    def close(self) -> None:
        self._stop.set()


class Watchers:
    """At most MAX_WATCHERS live watchers in this process, least recently used closed first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: OrderedDict[int, Watcher] = OrderedDict()

    def open(self, workdir: Path, git_dir: Path) -> Watcher | None:
        try:
            watcher = Watcher(workdir, git_dir)
        except Exception as e:  # noqa: BLE001 - no watcher: the session scans instead
            log.info("no file watcher for %s: %s", workdir, e)
            return None
        with self._lock:
            self._live[id(watcher)] = watcher
            while len(self._live) > MAX_WATCHERS:
                _, oldest = self._live.popitem(last=False)
                oldest.close()
        return watcher

    def touch(self, watcher: Watcher) -> None:
        with self._lock:
            if id(watcher) in self._live:
                self._live.move_to_end(id(watcher))

    def forget(self, watcher: Watcher) -> None:
        watcher.close()
        with self._lock:
            self._live.pop(id(watcher), None)


WATCHERS = Watchers()
