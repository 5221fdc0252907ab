"""One live connection to an MCP server, through the official SDK's `Client`.

The SDK's client is an async context held open by a task of its own (`_hold`): its
transport's task group must be entered and left by one task, while calls come from the turns'
tasks. Every way a server fails becomes `Failed` with a message the model can read: it will
not start, it exits mid-call, it answers garbage, it exceeds `BRAID_MCP_TIMEOUT`. A failed
connection is closed (its process killed); the pool starts a new one on the next call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

from server.agent.mcp_servers.config import HttpServer, ServerEntry, StdioServer
from server.agent.mcp_servers.launch import Failed, Refused, stdio_params
from server.agent.sandbox.limits import Limits
from server.base.settings import variable_of
from server.model.reach import pinned_transport

log = logging.getLogger("braid")
STDERR_TAIL = 2000  # characters of a server's stderr quoted when it will not start
CLOSE_WAIT = 5.0  # seconds a server is given to stop before its task is cancelled
# A start may take longer than a call: a server in Python imports its SDK first (seconds on
# a busy machine). The longer of this and BRAID_MCP_TIMEOUT.
START_TIMEOUT = 60.0


class Connection:
    def __init__(self, entry: ServerEntry, workdir: Path, data_dir: Path,
                 timeout: float, limits: Limits, session_id: str,
                 hosts: tuple[str, ...]) -> None:
        self.entry, self.workdir, self.data_dir, self.timeout = entry, workdir, data_dir, timeout
        self.hosts = hosts  # BRAID_MCP_HOSTS: private hosts an HTTP server may be on
        self.limits, self.session_id = limits, session_id
        self.tools: list[Tool] = []
        self.last_used = time.monotonic()
        self.calls = 0  # in flight: an idle sweep leaves a busy connection alone
        self.closed = False
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: IO[str] | None = None

    async def open(self) -> list[Tool]:
        """Start (or reach) the server and list its tools; Failed if it cannot."""
        ready: asyncio.Future[list[Tool]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-{self.entry.name}")
        allowed = max(self.timeout, START_TIMEOUT)
        try:
            self.tools = await asyncio.wait_for(asyncio.shield(ready), allowed)
        except TimeoutError:
            await self.close()
            raise Failed(f"MCP server {self.entry.name!r} did not start within "
                         f"{allowed:g}s") from None
        except Refused as exc:
            await self.close()
            raise Failed(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - whatever the SDK or the server raised
            why = f"{_describe(exc)}{self._stderr_tail()}"
            await self.close()
            raise Failed(f"MCP server {self.entry.name!r} did not start: {why}") from None
        return self.tools

    async def _hold(self, ready: asyncio.Future[list[Tool]]) -> None:
        try:
            # Timeouts are ours (`open`, `call`): the start may take longer than a call.
            async with Client(self._transport()) as client:
                tools: list[Tool] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._client = client
                ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to `open`, or the end of a closing one
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else Failed("stopped"))
            elif not isinstance(exc, asyncio.CancelledError | Exception):
                raise
        finally:
            self.closed = True
            self._client = None

    def _transport(self) -> Any:
        entry = self.entry
        if isinstance(entry, StdioServer):
            params = stdio_params(entry, self.workdir, self.data_dir, self.limits,
                                  self.session_id)
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            return stdio_client(params, errlog=self._stderr)
        assert isinstance(entry, HttpServer)
        # Every connection under the URL rules, to the address checked (DNS rebinding).
        http = httpx2.AsyncClient(headers=entry.headers, trust_env=False,
                                  timeout=httpx2.Timeout(30.0, read=self.timeout + 5),
                                  transport=pinned_transport(
                                      self.hosts, "an MCP server", variable_of("mcp_hosts")))
        return streamable_http_client(entry.url, http_client=http)

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        """One tool call; Failed when the server does not answer it (the connection is then
        closed: the next call starts the server again)."""
        client = self._client
        if client is None or self.closed:
            raise Failed(f"MCP server {self.entry.name!r} is not running")
        self.calls += 1
        try:
            async with asyncio.timeout(self.timeout):
                return await client.call_tool(tool, args)
        except TimeoutError:
            await self.close()
            raise Failed(f"MCP server {self.entry.name!r} did not answer within "
                         f"{self.timeout:g}s (BRAID_MCP_TIMEOUT); it was stopped") from None
        except asyncio.CancelledError:
            await asyncio.shield(self.close())  # a stopped turn: the call ends with its server
            raise
        except Exception as exc:  # noqa: BLE001 - the server exited, or answered garbage
            why = f"{_describe(exc)}{self._stderr_tail()}"
            await self.close()
            raise Failed(f"MCP server {self.entry.name!r} failed during the call: "
                         f"{why}") from None
        finally:
            self.calls -= 1
            self.last_used = time.monotonic()

    async def close(self) -> None:
        """Stop the server (its process ends with the SDK's transport)."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_WAIT)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except BaseException:  # noqa: BLE001 - its failure was reported where it happened
                pass
        self.closed = True
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _stderr_tail(self) -> str:
        err = self._stderr
        if err is None or err.closed:
            return ""
        try:
            err.seek(0)
            text = err.read()[-STDERR_TAIL:].strip()
        except (OSError, ValueError):
            return ""
        return f"\nits stderr:\n{text}" if text else ""


def _describe(exc: BaseException) -> str:
    """An exception as one readable line (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
