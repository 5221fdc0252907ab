"""Trying a connection before it is kept: a model endpoint must answer `GET /v1/models`
with the key given (its models, when the user named none, are the ones listed); an HTTP
MCP server must start a session and list its tools. What failed is said in words, with the
key and any credential of the URL as ***."""

from __future__ import annotations

import asyncio
from pathlib import Path

from server.agent.mcp_servers.config import HttpServer
from server.agent.mcp_servers.launch import Failed
from server.agent.sandbox.limits import Limits
from server.base.errors import BadRequest
from server.base.settings import variable_of
from server.model import reach
from server.model.client import describe
from server.model.endpoints import Endpoint

LIST_TIMEOUT = 10.0  # seconds an endpoint has to list its models
MAX_MODELS = 200  # of a listing kept


class ConnectionFailed(BadRequest):
    """A connection that could not be reached or did not answer as it should; nothing of
    it is kept."""

    code = "connection_failed"


async def endpoint_models(ep: Endpoint, hosts: tuple[str, ...]) -> list[str]:
    """The models `ep` lists (GET /v1/models, with its key); ConnectionFailed if it cannot.
    `hosts`: BRAID_ENDPOINT_HOSTS, held at the connection (reach.pinned_transport)."""
    import httpx2
    import openai

    base_url, query = ep.request_url()
    timeout = httpx2.Timeout(LIST_TIMEOUT, connect=LIST_TIMEOUT)
    client = openai.AsyncOpenAI(
        base_url=base_url, default_query=query or None, api_key=ep.key() or "unset",
        max_retries=0, timeout=timeout, http_client=httpx2.AsyncClient(
            timeout=timeout, transport=reach.pinned_transport(
                hosts, "a model endpoint", variable_of("endpoint_hosts"))))
    try:
        async with asyncio.timeout(LIST_TIMEOUT + 1):
            page = await client.models.list()
        ids = [str(item.id) for item in page.data if item.id][:MAX_MODELS]
    except Exception as e:  # noqa: BLE001 - every failure is said in words
        raise ConnectionFailed(describe(e, ep, "", LIST_TIMEOUT)) from None
    finally:
        await client.close()
    if not ids:
        raise ConnectionFailed(f"the server at {ep.where()} lists no models: name them")
    return ids


async def server_tools(server: HttpServer, data_dir: Path, timeout: float,
                       hosts: tuple[str, ...]) -> list[str]:
    """The names of the tools the MCP server `server` offers; ConnectionFailed if it is not
    reached or does not speak MCP. `hosts`: BRAID_MCP_HOSTS."""
    from server.agent.mcp_servers.connection import Connection

    conn = Connection(server, data_dir, data_dir, timeout, Limits(), "", hosts)
    try:
        tools = await conn.open()
    except Failed as e:
        raise ConnectionFailed(str(e)) from None
    finally:
        await conn.close()
    return [t.name for t in tools]
