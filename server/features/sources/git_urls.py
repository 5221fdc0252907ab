"""Git URLs an import may clone (DESIGN §4 "Boundaries", "Git URLs"): only the schemes of
BRAID_IMPORT_SCHEMES (https by default; http, git and ssh when listed; never ext::, fd:: or
file:// through a URL), and a host that resolves to a loopback, private, link-local,
unique-local, unspecified or multicast address only when BRAID_IMPORT_HOSTS lists its name or
a CIDR holding the address (else `forbidden`), so the server cannot be made to fetch from
its own network.

The address checked is the address used: the clone gets `http.curloptResolve` pinning the
host to it (a DNS answer that changes between the check and the connection changes
nothing), a git:// URL is rewritten to it, and no redirect is followed (nor a dumb server's
http-alternates, which git ties to the same setting). A failed clone says "could not fetch
URL" and nothing of what the other end answered."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from server.agent.sandbox.addresses import IP, internal, listed, literal
from server.base.errors import BadRequest, Forbidden
from server.base.settings import Settings

DEFAULT_PORTS = {"https": 443, "http": 80, "git": 9418, "ssh": 22}
_ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}
_SCP = re.compile(r"^[\w.-]+@([\w.-]+):")  # user@host:path, as git clone reads it (sources.is_url)
_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
FETCH_FAILED = "could not fetch URL"


@dataclass(frozen=True)
class Remote:
    """A URL checked for its form and scheme (no DNS yet)."""

    url: str  # as git will get it
    scheme: str  # https | http | git | ssh
    host: str  # lower case; an IPv6 literal without brackets
    port: int


def parse_url(settings: Settings, raw: str) -> Remote:
    """`raw` as a Remote, or `bad_request` (not a URL Braid can read) / `forbidden` (a scheme
    this server does not allow)."""
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F or c == "\\" for c in raw):
        raise BadRequest("a git URL is plain ASCII without spaces or backslashes")
    scp = _SCP.match(raw)
    if scp and "://" not in raw:
        return _allowed(settings, Remote(raw, "ssh", _host(scp.group(1)), 22))
    parts = urlsplit(raw)
    scheme = _ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme not in DEFAULT_PORTS:
        raise BadRequest(f"{parts.scheme}:// is not a git URL Braid can import "
                         f"({', '.join(DEFAULT_PORTS)})")
    if parts.netloc.count("@") > 1 or not parts.hostname:
        raise BadRequest("the git URL has no clear host")
    if scheme == "git" and "@" in parts.netloc:
        raise BadRequest("a git:// URL has no user name")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as e:
        raise BadRequest("the git URL's port is not a number") from e
    host = _host(parts.hostname)
    user = parts.netloc.rpartition("@")[0]
    shown_host = f"[{host}]" if ":" in host else host
    netloc = (f"{user}@" if user else "") + shown_host + (f":{parts.port}" if parts.port else "")
    url = f"{parts.scheme}://{netloc}{parts.path}" + (f"?{parts.query}" if parts.query else "")
    return _allowed(settings, Remote(url, scheme, host, port))


def _host(name: str) -> str:
    host = name.lower()
    if _literal(host) is None and (not _HOST.match(host) or re.fullmatch(r"[0-9.]+|0x.*", host)):
        raise BadRequest("the git URL's host is not a host name or an IP address")
    return host


def _allowed(settings: Settings, remote: Remote) -> Remote:
    if remote.scheme not in settings.import_schemes:
        raise Forbidden(f"{remote.scheme}:// imports are off on this server "
                        f"(BRAID_IMPORT_SCHEMES: {', '.join(settings.import_schemes)})")
    return remote


def _literal(host: str) -> IP | None:
    return literal(host)


def _listed(settings: Settings, host: str, addr: IP) -> bool:
    return listed(settings.import_hosts, host, addr)


def addresses(settings: Settings, remote: Remote) -> list[IP]:
    """The host's addresses, each one allowed, else `forbidden`; a name that does not
    resolve fails as any fetch does."""
    literal = _literal(remote.host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = socket.getaddrinfo(remote.host, remote.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            raise BadRequest(FETCH_FAILED) from e
        # An address, "host%scope" for a scoped IPv6 one (the int is AF_PACKET's, not asked).
        found = list(dict.fromkeys(_address(str(i[4][0]).split("%")[0])
                                   for i in infos))
    for addr in found:
        if internal(addr) and not _listed(settings, remote.host, addr):
            raise Forbidden(f"{remote.host} is an address of the server's own network: "
                            "imports from it are off (BRAID_IMPORT_HOSTS)")
    if not found:
        raise BadRequest(FETCH_FAILED)
    return found


def _address(text: str) -> IP:
    found = literal(text)
    if found is None:
        raise BadRequest(FETCH_FAILED)
    return found


def clone_plan(settings: Settings, remote: Remote) -> tuple[str, tuple[str, ...]]:
    """(the URL to clone, its `-c` overrides): transports off but this one, no redirect,
    and the connection pinned to the addresses just checked."""
    found = addresses(settings, remote)
    config = [f"protocol.{remote.scheme}.allow=always", "http.followRedirects=false"]
    url = remote.url
    if remote.scheme in ("http", "https") and _literal(remote.host) is None:
        pinned = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in found)
        config.append(f"http.curloptResolve={remote.host}:{remote.port}:{pinned}")
    elif remote.scheme == "git" and _literal(remote.host) is None:
        addr = found[0]
        shown = f"[{addr}]" if addr.version == 6 else str(addr)
        url = url.replace(f"//{remote.host}", f"//{shown}", 1)
    elif remote.scheme == "ssh":
        # The server's own ssh, as an admin who listed ssh asked (SAFE_CONFIG turns it off
        # for every other git command); the host key is checked against the name.
        config.append("core.sshCommand=ssh")
    return url, tuple(config)
