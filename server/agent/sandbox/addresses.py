"""Which addresses the server's own network holds (loopback, private, link-local, ...), and
whether an operator's list (names or CIDRs) allows one: the rule the import's git URLs
(features/sources/git_urls.py) and the shell's egress proxy (egress.py) both keep."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"),
          ipaddress.IPv6Network("::ffff:0:0:0/96"))  # and SIIT's IPv4-translated form
_IPV4_COMPAT = ipaddress.IPv6Network("::/96")


def literal(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def internal(addr: IP) -> bool:
    """Loopback, private, link-local, unique-local, unspecified, reserved or multicast (an
    IPv4 address inside an IPv6 one judged as itself)."""
    if isinstance(addr, ipaddress.IPv6Address):
        inner = addr.ipv4_mapped or addr.sixtofour
        if inner is None and (any(addr in net for net in _NAT64) or addr in _IPV4_COMPAT):
            # A NAT64 gateway (RFC 6052), SIIT or an old IPv4-compatible form carries the IPv4
            # address in the last 32 bits: `64:ff9b::10.0.0.1` reaches 10.0.0.1.
            inner = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if inner is not None:
            addr = inner
    return addr.is_multicast or not addr.is_global


def listed(allowed: Iterable[str], host: str, addr: IP) -> bool:
    """Whether `allowed` (host names or CIDRs, lower case) names `host` or holds `addr`."""
    for entry in allowed:
        if entry == host:
            return True
        try:
            if addr in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False
