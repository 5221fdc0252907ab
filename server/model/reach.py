"""Which URLs a user's own connection may reach (a model endpoint added on the page, an HTTP
MCP server): the import's URL rules. https only; a host that resolves to an address of the
server's own network (loopback, private, link-local, unique-local, multicast) only when the
operator lists it (names or CIDRs: BRAID_ENDPOINT_HOSTS for endpoints, BRAID_MCP_HOSTS for MCP
servers), and then plain http too. The host is resolved here and every address it has must
be allowed; a user name or password in the URL is refused (a key goes in its own field).
`pinned_transport` holds the same rules at each connection and connects to the address it
checked, so a name that resolves elsewhere after the check (DNS rebinding) reaches nothing."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from server.base.errors import BadRequest, BraidError, Forbidden

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(hosts: tuple[str, ...], url: str, what: str, setting: str) -> str:
    """`url` if Braid may reach it, else BadRequest or Forbidden naming `what` ("an MCP
    server") and the operator's `setting`."""
    parts = urlsplit(url)
    try:
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        raise BadRequest(f"{what}'s URL is not a valid URL") from None
    if not host or parts.username or parts.password:
        raise BadRequest(f"{what}'s URL needs a host (and no user:password in it)")
    if parts.scheme != "https" and not (parts.scheme == "http" and listed(hosts, host)):
        raise Forbidden(f"{what} must be reached over https:// (plain http only for a "
                        f"host {setting} lists)")
    checked_addresses(hosts, host, port or 443, what, setting)
    return url


def checked_addresses(hosts: tuple[str, ...], host: str, port: int, what: str,
                      setting: str) -> list[Address]:
    """`host`'s addresses, every one allowed (else BadRequest or Forbidden)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise BadRequest(f"{what}'s host {host} does not resolve") from None
    found: list[Address] = []
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if (addr.is_multicast or not addr.is_global) and not listed(hosts, host, addr):
            raise Forbidden(f"{host} is an address of the server's own network: {what} "
                            f"there is off ({setting})")
        found.append(addr)
    return found


def pinned_transport(hosts: tuple[str, ...], what: str, setting: str) -> Any:
    """An `httpx2` transport whose every connection passes these rules: the host is resolved
    and checked when it connects, and the connection goes to the address checked (TLS still
    names the host). A refusal is a connection error carrying the rule's sentence."""
    import httpcore2
    import httpx2

    class Pinned(httpcore2.AsyncNetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None,
                              socket_options: Any = None) -> Any:
            try:
                found = await asyncio.to_thread(checked_addresses, hosts, host, port, what,
                                                setting)
            except BraidError as e:
                raise httpcore2.ConnectError(e.message) from None
            return await self.inner.connect_tcp(str(found[0]), port, timeout, local_address,
                                                socket_options)

        async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                      socket_options: Any = None) -> Any:
            raise httpcore2.ConnectError(f"{what} is reached over TCP only")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx takes no network backend of its own: its pool is made again around ours, with
    # the TLS context it made (the system's roots).
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=transport._pool._ssl_context, network_backend=Pinned())
    return transport


def listed(hosts: tuple[str, ...], host: str, addr: Address | None = None) -> bool:
    """Whether the operator's list names `host`, or a network holding it (or `addr`)."""
    for entry in hosts:
        if entry == host:
            return True
        try:
            net = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if addr is None:
            try:
                addr = ipaddress.ip_address(host)
            except ValueError:
                continue
        if addr in net:
            return True
    return False
