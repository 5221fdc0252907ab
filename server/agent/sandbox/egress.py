"""Braid's egress proxy (DESIGN §4 "The shell"): a sandboxed command has no network but its
own loopback, where this proxy listens (127.0.0.1:3128, `http_proxy`/`https_proxy` point
there). It takes HTTP CONNECT (HTTPS, any TLS) and plain HTTP in absolute form, and for each
request:

1. resolves the host; a name or literal that is (or resolves to) a loopback, private,
   link-local or other address of the server's own network is refused without a question
   unless `allowed_internal` (BRAID_SHELL_HOSTS: names or CIDRs) lists it (addresses.py, the
   same rule as the import's git URLs);
2. asks `consent(host, port)` (the session's `shell_network`, or the user: agent/network.py);
3. connects to the address it checked (never resolves again), then relays bytes both ways.
A refusal is an HTTP 403 whose body says why, so the command's own error shows it.

The listener is made from the server inside the sandbox's network namespace (`attach`:
setns on a thread of its own, then back), so no process runs in the sandbox for it and the
command's start is not delayed: bwrap waits on `--block-fd` until the listener is up.
Entering the namespace needs CAP_SYS_ADMIN over it (a root server, or the namespace's owner
with the capability in its own namespace); where that fails the command runs with loopback
only, and the shell says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from server.agent.sandbox.addresses import IP, internal, listed, literal

PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PORT}"
CLONE_NEWNET = 0x40000000
MAX_HEAD = 64 * 1024
Consent = Callable[[str, int], Awaitable[str | None]]  # None: allowed; else why not


def proxy_env() -> dict[str, str]:
    """The variables that send a command's HTTP(S) through the proxy (curl, pip, npm, git,
    Python's urllib and requests read one or the other spelling; the contract names
    ALL_PROXY too: curl's for every scheme)."""
    return {"http_proxy": PROXY_URL, "https_proxy": PROXY_URL, "HTTP_PROXY": PROXY_URL,
            "HTTPS_PROXY": PROXY_URL, "ALL_PROXY": PROXY_URL, "all_proxy": PROXY_URL,
            "npm_config_proxy": PROXY_URL,
            "npm_config_https_proxy": PROXY_URL, "no_proxy": "localhost,127.0.0.1,::1",
            "NO_PROXY": "localhost,127.0.0.1,::1"}


def attach(pid: int) -> socket.socket:
    """A listening socket on 127.0.0.1:PORT inside the network namespace of process `pid`
    (the sandbox's PID 1). Raises OSError when the namespace cannot be entered."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def work() -> None:  # a thread of its own: setns changes only the calling thread
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(target, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns into the sandbox's network")
                try:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", PORT))
                    sock.listen(128)
                    sock.setblocking(False)
                    made.append(sock)
                finally:
                    libc.setns(own, CLONE_NEWNET)  # the thread ends next in any case
            finally:
                os.close(target)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            failed.append(e)
        finally:
            os.close(own)

    thread = threading.Thread(target=work, name=f"egress-{pid}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0] if isinstance(failed[0], OSError) else OSError(str(failed[0]))
    return made[0]


class Proxy:
    """One command's proxy, served on the event loop from a listener `attach` made."""

    def __init__(self, consent: Consent, allowed_internal: Sequence[str]) -> None:
        self.consent = consent
        self.allowed_internal = tuple(allowed_internal)
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, sock: socket.socket) -> None:
        self.server = await asyncio.start_server(self._client, sock=sock)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            if task is not None:
                self.tasks.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return await _refuse(writer, 431, "request head too large")
        first, _, rest = head.decode("latin-1").partition("\r\n")
        parts = first.split()
        if len(parts) != 3:
            return await _refuse(writer, 400, "not an HTTP request")
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            path = None
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                return await _refuse(writer, 400, "a proxy request names an http:// URL "
                                     "(HTTPS goes through CONNECT)")
            host = url.hostname
            port_text = str(url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536 or not host:
            return await _refuse(writer, 400, "bad host or port")
        host, port = host.lower(), int(port_text)
        addrs, why = await self._addresses(host, port)
        if why is None:
            why = await self.consent(host, port)
        if why is not None:
            return await _refuse(writer, 403, why)
        upstream = await _connect(addrs, port)
        if upstream is None:
            return await _refuse(writer, 502, f"could not connect to {host}:{port}")
        up_reader, up_writer = upstream
        try:
            if path is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_origin_form(method, path, version, rest))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _addresses(self, host: str, port: int) -> tuple[list[IP], str | None]:
        found = literal(host)
        if found is not None:
            addrs = [found]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                return [], f"{host} does not resolve"
            addrs = list(dict.fromkeys(a for i in infos
                                       if (a := literal(str(i[4][0]).split("%")[0]))))
        if not addrs:
            return [], f"{host} does not resolve"
        for addr in addrs:
            if internal(addr) and not listed(self.allowed_internal, host, addr):
                return [], (f"{host} is an address of the server's own network: "
                            "the sandbox may not reach it (BRAID_SHELL_HOSTS)")
        return addrs, None


async def _connect(addrs: list[IP], port: int
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    for addr in addrs:
        try:
            return await asyncio.wait_for(asyncio.open_connection(str(addr), port), 30)
        except (OSError, TimeoutError):
            continue
    return None


def _origin_form(method: str, path: str, version: str, rest: str) -> bytes:
    """A proxy request rewritten for the origin: its path only, no proxy headers, and the
    connection closed after it (the next request may name another host)."""
    kept = [line for line in rest.split("\r\n") if line and not line.lower().startswith(
        ("proxy-connection:", "proxy-authorization:", "connection:", "keep-alive:"))]
    head = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(head).encode("latin-1")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def _refuse(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
               502: "Bad Gateway"}
    body = f"Braid's proxy: {why}\n".encode()
    writer.write(f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\n"
                 f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()
