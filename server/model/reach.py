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
    """An `httpx2` transport whose every request passes these rules: the host is resolved
    and checked as it is sent, and the request goes to the address checked (the Host
    header and TLS's server name stay the host's, so its certificate is still verified).
    A refusal is a connection error carrying the rule's sentence."""
    import httpx2

    class Pinned(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            host, port = request.url.host, request.url.port
            try:
                found = await asyncio.to_thread(
                    checked_addresses, hosts, host,
                    port or (443 if request.url.scheme == "https" else 80), what, setting)
            except BraidError as e:
                raise httpx2.ConnectError(e.message, request=request) from None
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
            request.url = request.url.copy_with(host=str(found[0]))  # Host: kept as made
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Pinned()


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
