"""The `mcpServers` configuration (DESIGN §4 "MCP tools", §7 `BRAID_MCP`), in the form other
clients use: `{"mcpServers": {NAME: {"command", "args"?, "env"?, "sandbox"?} | {"url",
"headers"?}}}`. A bad file stops the start with a message naming what is wrong (settings are
checked where they are read); an HTTP server's URL is held to the import's rules: https, and
a host of the server's own network only when `BRAID_MCP_HOSTS` lists it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from server.base.errors import BadRequest
from server.base.records import ConnectionRecord
from server.base.settings import Settings, variable_of
from server.model import reach

PREFIX = "mcp__"
# A server's name goes into every tool name the model sees (`mcp__NAME__TOOL`), which the
# model APIs hold to [A-Za-z0-9_-]{1,64}; "__" would make the name ambiguous.
_NAME = re.compile(r"[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*")
_TOOL = re.compile(r"[A-Za-z0-9_-]+")
MAX_TOOL_NAME = 64


@dataclass(frozen=True)
class StdioServer:
    """A server Braid starts per session, speaking MCP on its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    sandbox: bool = True  # False only as the operator's explicit choice


@dataclass(frozen=True)
class HttpServer:
    """A server reached over streamable HTTP."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


ServerEntry = StdioServer | HttpServer


def load(settings: Settings) -> dict[str, ServerEntry]:
    """The servers `BRAID_MCP` names (none without it); ValueError for a bad file."""
    if settings.mcp_file is None:
        return {}
    try:
        raw = json.loads(Path(settings.mcp_file).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"BRAID_MCP: cannot read {settings.mcp_file}: {exc}") from None
    try:
        return parse(raw)
    except BadRequest as exc:
        raise ValueError(f"BRAID_MCP ({settings.mcp_file}): {exc.message}") from None


def parse(raw: object) -> dict[str, ServerEntry]:
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise BadRequest('the file must hold {"mcpServers": {NAME: {...}}}')
    out: dict[str, ServerEntry] = {}
    for name, entry in raw["mcpServers"].items():
        out[name] = entry_of(name, entry)
    return out


def entry_of(name: object, entry: object) -> ServerEntry:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 30:
        raise BadRequest(f"server name {name!r} must be letters, digits, - and single _ "
                         "(at most 30)")
    if not isinstance(entry, dict):
        raise BadRequest(f"server {name!r} must be an object")
    if "command" in entry:
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command:
            raise BadRequest(f"server {name!r}: command must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise BadRequest(f"server {name!r}: args must be a list of strings")
        sandbox = entry.get("sandbox", True)
        if not isinstance(sandbox, bool):
            raise BadRequest(f"server {name!r}: sandbox must be true or false")
        return StdioServer(name, command, tuple(args), _strings(name, entry, "env"), sandbox)
    if "url" in entry:
        url = entry["url"]
        if not isinstance(url, str) or not url:
            raise BadRequest(f"server {name!r}: url must be a string")
        return HttpServer(name, url, _strings(name, entry, "headers"))
    raise BadRequest(f"server {name!r} needs a command (stdio) or a url (streamable HTTP)")


def _strings(name: str, entry: dict[str, object], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadRequest(f"server {name!r}: {key} must be an object of strings")
    return dict(value)


def tool_name(server: str, tool: str) -> str | None:
    """The name the model sees, or None for a tool whose name the model APIs refuse."""
    name = f"{PREFIX}{server}__{tool}"
    return name if _TOOL.fullmatch(tool) and len(name) <= MAX_TOOL_NAME else None


def split_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of a `mcp__SERVER__TOOL` name."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX):].partition("__")
    return (server, tool) if sep and server and tool else None


def check_url(hosts: tuple[str, ...], url: str) -> str:
    """`url` if Braid may reach it (the import's URL rules, model/reach.py), else BadRequest
    or Forbidden. The host is resolved here; each of its addresses must be allowed."""
    return reach.check_url(hosts, url, "an MCP server", variable_of("mcp_hosts"))


def user_servers(records: list[ConnectionRecord]) -> dict[str, HttpServer]:
    """A user's own HTTP servers (added on the page; store/users.py) as entries."""
    return {r["name"]: HttpServer(r["name"], r["url"], dict(r["secret"]))
            for r in records if r["kind"] == "mcp"}
