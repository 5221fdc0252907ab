"""Which URLs a user's own connection may reach (a model endpoint added on the page, an HTTP
MCP server): the import's URL rules. https only; a host that resolves to an address of the
server's own network (loopback, private, link-local, unique-local, multicast) only when the
operator lists it (names or CIDRs: BRAID_ENDPOINT_HOSTS for endpoints, BRAID_MCP_HOSTS for MCP
servers), and then plain http too. The host is resolved here and every address it has must
be allowed; a user name or password in the URL is refused (a key goes in its own field)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from server.base.errors import BadRequest, Forbidden

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
    try:
        infos = socket.getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise BadRequest(f"{what}'s host {host} does not resolve") from None
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if (addr.is_multicast or not addr.is_global) and not listed(hosts, host, addr):
            raise Forbidden(f"{host} is an address of the server's own network: {what} "
                            f"there is off ({setting})")
    return url


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
