"""`Braid`: the core's context object — settings, stores, the event bus, branch locks, live
runs — and its lifecycle (start-up recovery, `recovery.start_up`; clean stop)."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from pathlib import Path

from server.agent.live_runs import ActiveRun, TurnGate
from server.agent.mcp_servers import config as mcp_config
from server.agent.mcp_servers.launch import sweep_orphans
from server.agent.mcp_servers.pool import McpPool
from server.agent.sandbox import box, syscalls
from server.agent.sandbox import limits as sandbox_limits
from server.agent.sandbox import start as sandbox_start
from server.app import power_cut, recovery
from server.app.memory import give_back_memory, limit_arenas
from server.backends.choose import make_index, make_queue, make_search, make_team, make_users
from server.base import memo
from server.base.pools import IdlingThreadPool
from server.base.settings import Settings
from server.features import queue
from server.git.packing import Packer
from server.model.client import ModelClient
from server.store.locks import BranchLocks
from server.store.session_store import SessionStore
from server.store.users import DEFAULT_USER, new_token

log = logging.getLogger("braid")
# Quiet steps after a release that give memory back again (the teardown frees more).
TRIMS_AFTER = 2


class Braid:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = SessionStore(self.data_dir / "sessions")
        # SQLite files in the data dir, or PostgreSQL with BRAID_DATABASE_URL (backends/choose.py):
        # then `team` coordinates several processes (the bus, branch locks, dead runs).
        self.index = make_index(settings)
        self.search = make_search(self.index)  # message text, in the index's database
        self.users = make_users(settings)
        # `locks`: who holds each branch (a turn, a revert, an upload, a merge); `runs`: the
        # runs this process drives (and, in a team, those it follows).
        self.locks: BranchLocks
        self.team, self.bus, self.runs, self.locks = make_team(self, settings)
        # Messages sent while their branch was busy (features/queue.py), in the index's
        # database; the next one starts when a run of this process frees its branch.
        self.queue = make_queue(self.index, self.team)
        self.runs.on_free = self._branch_freed
        self._draining: set[asyncio.Task[object]] = set()
        self.packer = Packer()  # packs idle sessions' loose objects in the background
        self.model = ModelClient(settings)
        # BRAID_ACTIVE_TURNS at once, BRAID_USER_TURNS of one user's
        self.turn_gate = TurnGate(settings.active_turns, settings.user_turns)
        # MCP servers' tools (BRAID_MCP): a connection per session, started on first use.
        self.mcp = McpPool(mcp_config.load(settings), self.data_dir, settings.mcp_timeout,
                           settings.idle_seconds, settings.mcp_hosts, sandbox_limits.Limits(
                               procs=settings.shell_max_procs, memory=settings.shell_max_memory,
                               write=settings.shell_max_write, timeout=settings.shell_timeout))
        self._reaper: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._marker: Path | None = None  # a clean stop removes it (app/power_cut.py)

    async def start(self) -> str:
        """Open the index and recover runs a killed server left RUNNING. Returns the default
        user's token (to print in the login URL)."""
        limit_arenas()
        # The loop's default executor (new session folders, packing, deletes) gives its
        # threads back when quiet, as idle sessions do theirs (D14).
        asyncio.get_running_loop().set_default_executor(IdlingThreadPool(
            max_workers=min(32, (os.cpu_count() or 1) + 4),
            idle_seconds=self.settings.idle_seconds, name="braid-pool"))
        # Servers a killed Braid on this data dir left behind (their Braid is gone).
        killed = sweep_orphans(self.data_dir)
        if killed:
            log.warning("stopped %d MCP server process(es) left by an earlier run", len(killed))
        await asyncio.get_running_loop().run_in_executor(None, self._shell_check)
        fresh_index = await self.index.open()
        fresh_index = await self.search.open() or fresh_index  # an older index: rebuilt
        await self.queue.open()
        self._marker, unclean = power_cut.mark_running(self.data_dir)  # (when it began)
        await recovery.start_up(self, self.team, fresh_index, unclean)
        power_cut.clear_markers(self.data_dir, self._marker)
        self._reaper = asyncio.create_task(self._release_idle(), name="braid-idle")
        # After recovery (a run left RUNNING is INTERRUPTED and holds nothing): what waited
        # starts now, and later whatever a free branch can take (queue.sweep).
        self._sweeper = asyncio.create_task(self._sweep_queue(), name="braid-queue")
        return self.users.set_token(DEFAULT_USER, self.settings.token or self._local_token())

    def _shell_check(self) -> None:
        """Whether the shell can be offered (DESIGN §4 "The shell"): in `sandbox` mode only
        where a sandbox can be made here, never silently unsandboxed; the reason goes to
        the log and the page (`settings.shell_unavailable`). A kill -9 during a command
        left its cgroup and processes: they end now."""
        settings = self.settings
        if settings.shell_mode == "host":
            log.warning("BRAID_SHELL=host: the agent's commands run unsandboxed, as the "
                        "server's own user")
        if settings.shell_mode != "sandbox":
            return
        why = box.why_not() or sandbox_start.why_not()
        if why is not None:
            settings.shell = False
            settings.shell_unavailable = why
            log.warning("the shell is not offered: no sandbox can be made here (%s)", why)
            return
        swept = sandbox_limits.sweep() if sandbox_limits.why_not() is None else 0
        if swept:
            log.info("ended %d sandboxed command(s) a stopped server left behind", swept)
        if sandbox_limits.why_not() is not None:
            log.warning("the shell's commands run without a cgroup (%s): bounded by rlimits "
                        "and their PID namespace only", sandbox_limits.why_not())
        if syscalls.program() is None:
            log.warning("the shell's commands run without the seccomp filter: it is written "
                        "for x86-64 only, and this machine is %s", platform.machine())

    def _local_token(self) -> str:
        """Without BRAID_TOKEN, the default user's token is made once and kept in the data
        dir (readable by its owner only), so a restart does not log open pages out."""
        path = self.data_dir / "token"
        if path.exists():
            token = path.read_text().strip()
            if token:
                return token
        token = new_token()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    def _branch_freed(self, active: ActiveRun) -> None:
        """A run ended: the next message queued for its branch starts (in the background,
        after the run's end events)."""
        task = asyncio.get_running_loop().create_task(
            self._drain(active.session_id, active.branch))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain(self, session_id: str, branch: str) -> object:
        try:
            return await queue.drain(self, session_id, branch)
        except Exception:  # noqa: BLE001 - the sweep tries again
            log.exception("could not start the queue of session %s", session_id)
            return None

    async def _sweep_queue(self) -> None:
        while True:
            try:
                await queue.sweep(self)
            except Exception:  # noqa: BLE001 - the next sweep tries again
                log.exception("queue sweep failed")
            await asyncio.sleep(queue.SWEEP_SECONDS)

    async def _release_idle(self) -> None:
        """Idle sessions give back their thread and repository (D14), now and then."""
        step = max(0.5, min(5.0, self.settings.idle_seconds / 2))
        again = 0
        while True:
            await asyncio.sleep(step)
            live = frozenset(a.session_id for a in self.runs.all())
            await self.mcp.sweep_idle()
            closing = self.store.release_idle(self.settings.idle_seconds,
                                              self.settings.open_sessions, live)
            if closing:
                await asyncio.gather(*map(asyncio.wrap_future, closing),
                                     return_exceptions=True)
            if closing and not live:  # quiet: the freed heap goes back to the system
                if not self.store.open_count():
                    memo.forget_all()  # the released sessions' kept messages
                await asyncio.to_thread(give_back_memory)
                again = TRIMS_AFTER
            elif again and not live and not self.store.open_count():
                # Still quiet: what the release set going is freed after it (the pools'
                # threads exit, closed sockets' and sessions' objects go), and glibc keeps
                # it unless asked; a step later, then once more, it is given back too.
                again -= 1
                await asyncio.to_thread(give_back_memory)
            else:
                again = 0

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        self.runs.on_free = None  # runs stopped now do not start the queue's next
        for task in list(self._draining):  # one starting now: settled at the next start
            task.cancel()
        await asyncio.gather(*self._draining, return_exceptions=True)
        for active in self.runs.all():
            active.stop("shutdown")
        for active in self.runs.all():
            try:
                await asyncio.wait_for(active.done.wait(), timeout=10)
            except TimeoutError:
                log.warning("run %s did not stop in time", active.run_id)
        await self.mcp.close()
        await asyncio.get_running_loop().run_in_executor(None, sandbox_start.shut)
        await self.packer.close()
        await self.model.close()
        if self._marker is not None:  # stopped cleanly: nothing to check at the next start
            self._marker.unlink(missing_ok=True)
        if self.team is not None:
            await self.team.stop()
        await self.index.close()
        self.users.close()
        self.store.close()
