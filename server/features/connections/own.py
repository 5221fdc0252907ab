"""The user's own connections (DESIGN §8 "the user's connections"): listed without their
secrets, added once they answered (probe.py), removed. A model endpoint's URL is held to the
import's rules with `BRAID_ENDPOINT_HOSTS`, an MCP server's with `BRAID_MCP_HOSTS`
(model/reach.py); the operator's endpoints and servers keep their names (one of theirs named
alike would win). Every call is the user's own: a user sees, uses and removes only theirs."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from server.agent.mcp_servers.config import HttpServer, check_url, entry_of, user_servers
from server.base.errors import BadRequest, NotFound, TooMany
from server.base.ids import now_iso
from server.base.records import ConnectionRecord
from server.base.results import ConnectionList, ConnectionView
from server.base.settings import variable_of
from server.features.connections import probe
from server.model import reach
from server.model.endpoints import DEFAULT, DEMO, Endpoint, redact_url, user_endpoints
from server.store.users import off_loop

if TYPE_CHECKING:
    from server.agent.services import Services

KINDS = ("model", "mcp")
MAX_CONNECTIONS = 32  # of one user
# An endpoint's name follows `@` in a model choice (`id@name`), so it holds no `@`.
ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")


def view(record: ConnectionRecord) -> ConnectionView:
    """What the page and the API show of a connection: never its key nor its headers."""
    return {"kind": record["kind"], "name": record["name"], "url": redact_url(record["url"]),
            "models": list(record["models"]), "secret_set": bool(record["secret"]),
            "created_at": record["created_at"]}


async def list_connections(braid: Services, user_id: str) -> ConnectionList:
    records = await off_loop(braid.users).connections(user_id)
    return {"connections": [view(r) for r in records]}


async def add_connection(braid: Services, user_id: str, kind: str, name: str, url: str,
                         key: str | None, headers: dict[str, str],
                         models: list[str]) -> ConnectionView:
    """Add (or replace) the user's connection `name` of `kind`, once it answered: a model
    endpoint lists its models (`models` none: the ones it lists), an MCP server its tools.
    Nothing is kept when it does not answer (`connection_failed`)."""
    users = off_loop(braid.users)
    mine = await users.connections(user_id)
    replaced = [r for r in mine if r["kind"] == kind and r["name"] == name]
    if len(mine) >= MAX_CONNECTIONS and not replaced:
        raise TooMany(f"at most {MAX_CONNECTIONS} connections a user: remove one first")
    url = url.strip().rstrip("/")
    if kind == "model":
        record = await _endpoint(braid, name, url, key, models)
    else:
        record = await _mcp_server(braid, name, url, headers)
    await users.put_connection(user_id, record)
    await _let_go(braid, user_id, replaced)
    return view(record)


async def _let_go(braid: Services, user_id: str, records: list[ConnectionRecord]) -> None:
    """What this process holds of connections the user removed or replaced: an endpoint's
    client, an MCP server's tools (learnt again if it comes back)."""
    for ep in user_endpoints(records).values():
        await braid.model.forget(ep)
    for server in user_servers(records).values():
        braid.mcp.forget(user_id, server)


async def _endpoint(braid: Services, name: str, url: str, key: str | None,
                    models: list[str]) -> ConnectionRecord:
    if not ENDPOINT_NAME.fullmatch(name):
        raise BadRequest("an endpoint's name is 1-40 letters, digits, '.', '_' or '-'")
    if name in (DEMO, DEFAULT) or name in braid.model.endpoints:
        raise BadRequest(f"the name {name!r} is one of the server's endpoints")
    await asyncio.to_thread(reach.check_url, braid.settings.endpoint_hosts, url,
                            "a model endpoint", variable_of("endpoint_hosts"))
    ep = Endpoint(name=name, base_url=url, api_key=key or None, own=True)
    listed = await probe.endpoint_models(ep, braid.settings.endpoint_hosts)
    return {"kind": "model", "name": name, "url": url,
            "secret": {"api_key": key} if key else {},
            "models": models or listed, "created_at": now_iso()}


async def _mcp_server(braid: Services, name: str, url: str,
                      headers: dict[str, str]) -> ConnectionRecord:
    entry = entry_of(name, {"url": url, "headers": headers})  # the configuration's rules
    assert isinstance(entry, HttpServer)
    if name in braid.mcp.servers:
        raise BadRequest(f"the name {name!r} is one of the server's MCP servers")
    await asyncio.to_thread(check_url, braid.settings.mcp_hosts, url)
    await probe.server_tools(entry, braid.data_dir, braid.settings.mcp_timeout,
                             braid.settings.mcp_hosts)
    return {"kind": "mcp", "name": name, "url": url, "secret": dict(headers), "models": [],
            "created_at": now_iso()}


async def remove_connection(braid: Services, user_id: str, kind: str,
                            name: str) -> ConnectionList:
    users = off_loop(braid.users)
    gone = [r for r in await users.connections(user_id)
            if r["kind"] == kind and r["name"] == name]
    if not gone or not await users.remove_connection(user_id, kind, name):
        raise NotFound(f"you have no {'endpoint' if kind == 'model' else 'MCP server'} "
                       f"named {name!r}")
    await _let_go(braid, user_id, gone)
    return await list_connections(braid, user_id)
