"""The MCP servers of one Braid process: a connection per (session, workdir, server), so two
sessions, two users, or a sub-agent's worktree and its parent never share a server process.

A user's own HTTP servers (added on the page) are offered in that user's sessions only: the
listing of a session's tools is given its owner's servers and the pool keeps them for the
session's calls; the operator's server of the same name wins. Their catalogs are kept per
user.

A server is started on first use: the first time a session's turn needs its tools, or a call
reaches it. The tools a server offers are remembered per server (its catalog), so a later
session is offered them without starting anything until a call comes. A connection idle for
`idle_seconds` is stopped (`sweep_idle`), as are a session's when it is deleted
(`stop_session`) and all of them at shutdown (`close`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.agent.mcp_servers.config import (
    HttpServer,
    ServerEntry,
    StdioServer,
    check_url,
    split_name,
    tool_name,
)
from server.agent.mcp_servers.launch import Failed
from server.agent.sandbox.limits import Limits
from server.base.errors import BraidError
from server.base.records import ToolSchema

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

    from server.agent.mcp_servers.connection import Connection

log = logging.getLogger("braid")
Key = tuple[str, str, str]  # session id, workdir, server name
Owner = tuple[str, str]  # whose server ("" for the operator's BRAID_MCP), its name
MAX_RESULT = 100_000  # characters of a result the model reads
RETRY_SECONDS = 60.0  # a server that failed to start is not started again to list its tools


@dataclass(frozen=True)
class OfferedTool:
    """An MCP tool as the model is offered it and the page lists it."""

    name: str  # mcp__SERVER__TOOL
    server: str
    tool: str
    description: str
    read_only: bool
    schema: ToolSchema


class McpPool:
    def __init__(self, servers: dict[str, ServerEntry], data_dir: Path, timeout: float,
                 idle_seconds: float, hosts: tuple[str, ...] = (),
                 limits: Limits | None = None) -> None:
        self.servers, self.hosts = servers, hosts  # hosts: BRAID_MCP_HOSTS
        self.limits = limits or Limits()  # a sandboxed server's (the shell's)
        self.data_dir, self.timeout, self.idle_seconds = data_dir, timeout, idle_seconds
        self._live: dict[Key, Connection] = {}
        self._starting: dict[Key, asyncio.Lock] = {}
        self._catalog: dict[Owner, list[OfferedTool]] = {}  # a server's tools, once seen
        self._failed: dict[Owner, str] = {}  # why a server last failed to start
        self._failed_at: dict[Owner, float] = {}
        # session id -> (its owner, the owner's own servers), as its last listing found them
        self._own: dict[str, tuple[str, dict[str, HttpServer]]] = {}

    # ------------------------------------------------------------------------ tools

    async def tools(self, session_id: str, workdir: Path, user_id: str = "",
                    own: dict[str, HttpServer] | None = None) -> list[OfferedTool]:
        """Every configured server's tools, and those of `own` (the session's owner's own
        servers, kept for the session's calls); a server not seen yet is started for this
        session to learn them; one that will not start offers none, and says why."""
        if own is not None:
            self.remember(session_id, user_id, own)
        out: list[OfferedTool] = []
        now = time.monotonic()
        for name, (owner, _) in self._servers_of(session_id).items():
            if owner not in self._catalog and now - self._failed_at.get(
                    owner, -RETRY_SECONDS) >= RETRY_SECONDS:
                try:
                    await self._connection(session_id, workdir, name)
                except Failed as exc:
                    log.warning("%s", exc)
                    continue
            out.extend(self._catalog.get(owner, ()))
        return out

    def remember(self, session_id: str, user_id: str, own: dict[str, HttpServer]) -> None:
        """The session's owner and their own servers, for the session's calls."""
        self._own[session_id] = (user_id, own)

    def _servers_of(self, session_id: str) -> dict[str, tuple[Owner, ServerEntry]]:
        """The servers a session may use: its owner's own, then the operator's (which win a
        name both use)."""
        user_id, own = self._own.get(session_id, ("", {}))
        out: dict[str, tuple[Owner, ServerEntry]] = {
            # Keyed by its URL too: another process may have seen the server the user changed.
            name: ((user_id, f"{name} {entry.url}"), entry) for name, entry in own.items()
            if user_id}
        out.update({name: (("", name), entry) for name, entry in self.servers.items()})
        return out

    def why_not(self, session_id: str = "") -> dict[str, str]:
        """The session's servers whose tools are not offered: why (the last start's
        failure)."""
        return {name: self._failed[owner] for name, (owner, _) in
                self._servers_of(session_id).items()
                if owner in self._failed and owner not in self._catalog}

    def read_only(self, name: str, session_id: str = "") -> bool:
        """Whether the tool says `readOnlyHint: true` (any other MCP tool is a write)."""
        split = split_name(name)
        found = self._servers_of(session_id).get(split[0]) if split else None
        if found is None:
            return False
        return any(t.name == name and t.read_only for t in self._catalog.get(found[0], ()))

    def is_mcp(self, name: str, session_id: str = "") -> bool:
        split = split_name(name)
        return split is not None and split[0] in self._servers_of(session_id)

    def is_stdio(self, name: str) -> bool:
        split = split_name(name)
        return split is not None and isinstance(self.servers.get(split[0]), StdioServer)

    # ------------------------------------------------------------------------- calls

    async def call(self, session_id: str, workdir: Path, name: str,
                   raw_args: str) -> tuple[str, bool]:
        """One call of `mcp__SERVER__TOOL`: (what the model reads, whether it failed)."""
        split = split_name(name)
        if split is None or split[0] not in self._servers_of(session_id):
            return f"error: unknown tool {name!r}", True
        try:
            args = json.loads(raw_args or "{}")
        except ValueError as exc:
            return f"error: arguments for {name} are not valid JSON: {exc}", True
        if not isinstance(args, dict):
            return f"error: arguments for {name} must be a JSON object", True
        try:
            conn = await self._connection(session_id, workdir, split[0])
            result = await conn.call(split[1], args)
        except Failed as exc:
            return f"error: {exc}", True
        return result_text(result)

    async def _connection(self, session_id: str, workdir: Path, server: str) -> Connection:
        key = (session_id, str(workdir), server)
        owner, entry = self._servers_of(session_id)[server]
        lock = self._starting.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._live.get(key)
            if conn is not None and not conn.closed and conn.entry == entry:
                conn.last_used = time.monotonic()
                return conn
            if conn is not None:  # the user changed the server since: a new connection
                await conn.close()
            # The SDK is imported on the first start: a Braid without MCP servers never pays it.
            from server.agent.mcp_servers.connection import Connection

            conn = Connection(entry, workdir, self.data_dir, self.timeout, self.limits,
                              session_id, self.hosts)
            try:
                if isinstance(entry, HttpServer):  # resolved at each start: DNS changes
                    await asyncio.to_thread(check_url, self.hosts, entry.url)
                tools = await conn.open()
            except BraidError as exc:
                self._failed_at[owner] = time.monotonic()
                self._failed[owner] = f"MCP server {server!r} was not reached: {exc.message}"
                raise Failed(self._failed[owner]) from None
            except Failed as exc:
                self._failed_at[owner] = time.monotonic()
                self._failed[owner] = str(exc)
                raise
            self._live[key] = conn
            self._catalog[owner] = offered(server, tools)
            self._failed.pop(owner, None)
            return conn

    def forget(self, user_id: str, server: HttpServer) -> None:
        """A user removed their server `server`: its tools are learnt again if it comes back."""
        for table in (self._catalog, self._failed, self._failed_at):
            table.pop((user_id, f"{server.name} {server.url}"), None)

    def live(self, session_id: str) -> list[Connection]:
        """The session's live connections (tests and the page look at them)."""
        return [c for k, c in self._live.items() if k[0] == session_id and not c.closed]

    # ---------------------------------------------------------------------- stopping

    async def stop_session(self, session_id: str) -> None:
        self._own.pop(session_id, None)
        await self._stop([k for k in self._live if k[0] == session_id])

    async def stop_under(self, workdir: Path) -> None:
        """A stopped turn: the servers working in its workdir (a call in flight ends)."""
        await self._stop([k for k, c in self._live.items()
                          if k[1] == str(workdir) and c.calls])

    async def stop_workdir(self, workdir: Path) -> None:
        """A sub-agent's worktree goes: the servers working in it too."""
        await self._stop([k for k in self._live if k[1] == str(workdir)])

    async def sweep_idle(self) -> None:
        now = time.monotonic()
        await self._stop([k for k, c in self._live.items() if c.closed or (
            not c.calls and now - c.last_used > self.idle_seconds)])

    async def close(self) -> None:
        await self._stop(list(self._live))

    async def _stop(self, keys: list[Key]) -> None:
        conns = [c for k in keys if (c := self._live.pop(k, None)) is not None]
        for k in keys:
            self._starting.pop(k, None)
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


def offered(server: str, tools: list[Tool]) -> list[OfferedTool]:
    out: list[OfferedTool] = []
    for tool in tools:
        name = tool_name(server, tool.name)
        if name is None:
            log.warning("MCP server %r: tool %r is not offered (its name is not one the model "
                        "APIs take)", server, tool.name)
            continue
        description = tool.description or ""
        schema: ToolSchema = {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": dict(tool.input_schema or {"type": "object", "properties": {}})}}
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        out.append(OfferedTool(name, server, tool.name, description, read_only, schema))
    return out


def result_text(result: CallToolResult) -> tuple[str, bool]:
    """A tool result as the model reads it: its text; an image, audio or a resource as a
    note; the structured content when there is no text."""
    parts: list[str] = []
    for item in result.content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(item, 'mime_type', '?')}, "
                         f"{len(str(getattr(item, 'data', '')))} base64 characters, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(item, 'uri', '?')}]")
        elif kind == "resource":
            res: Any = getattr(item, "resource", None)
            text = getattr(res, "text", None)
            parts.append(str(text) if text is not None
                         else f"[resource: {getattr(res, 'uri', '?')}, not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    text = "\n".join(parts)[:MAX_RESULT] or "(no output)"
    if result.is_error:
        return f"error: {text}", True
    return text, False
