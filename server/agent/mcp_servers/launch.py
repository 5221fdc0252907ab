"""How a stdio MCP server is started, in one place (`stdio_params`), and what a killed Braid
leaves behind (`sweep_orphans`).

A server runs in its session's sandbox (DESIGN §4 "The shell"); where the sandbox cannot be
made, a server is refused, never started unsandboxed, unless its entry says
`"sandbox": false` (the operator's explicit choice). Every server is started under
`setpriv --pdeathsig KILL`, so it dies with the Braid process that started it, and carries
`BRAID_MCP_OWNER=<data dir>:<pid>` in its environment: at the next start the processes whose
owner is this data dir and whose Braid is gone are killed (what a server left running
behind, such as its own children, included)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.mcp_servers.config import StdioServer

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

OWNER = "BRAID_MCP_OWNER"


class Refused(Exception):
    """A server Braid will not start (the message is what the model and the user read)."""


class Failed(Exception):
    """A server that could not answer: the message is the call's error result."""


def owner_of(data_dir: Path) -> str:
    """This data dir's part of the owner tag."""
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]


def sandbox_argv(argv: list[str], workdir: Path) -> list[str] | None:
    """`argv` inside the session's sandbox, or None where no sandbox can be made."""
    return None  # the shell's sandbox module takes this place once it exists


def stdio_params(entry: StdioServer, workdir: Path, data_dir: Path) -> StdioServerParameters:
    """The server's command line, environment and folder (its session's workdir)."""
    from mcp.client.stdio import StdioServerParameters  # the SDK costs ~2 s of CPU to import

    argv = [entry.command, *entry.args]
    if entry.sandbox:
        boxed = sandbox_argv(argv, workdir)
        if boxed is None:
            raise Refused(f"MCP server {entry.name!r} was not started: no sandbox can be "
                          "made here, and its entry does not say \"sandbox\": false")
        argv = boxed
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    env = {**entry.env, OWNER: f"{owner_of(data_dir)}:{os.getpid()}"}
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(workdir),
                                 encoding_error_handler="replace")


def sweep_orphans(data_dir: Path) -> list[int]:
    """Kill the servers an earlier Braid on this data dir left (killed before it could stop
    them); returns their process ids."""
    mine = owner_of(data_dir)
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        tag = _owner_tag(entry)
        if tag is None:
            continue
        owner, _, pid = tag.partition(":")
        if owner != mine or (pid.isdigit() and _alive(int(pid))):
            continue
        try:
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
        except OSError:
            continue
    return killed


def _owner_tag(proc: Path) -> str | None:
    try:
        environ = (proc / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return None
    for item in environ.split(b"\0"):
        if item.startswith(OWNER.encode() + b"="):
            return item[len(OWNER) + 1:].decode(errors="replace")
    return None


def _alive(pid: int) -> bool:
    """Whether the Braid that started a server still runs (ours started none before this
    sweep, so our own id means an earlier Braid's that was reused; a zombie is gone)."""
    if pid == os.getpid():
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
