"""How a stdio MCP server is started, in one place (`stdio_params`), and what a killed Braid
leaves behind (`sweep_orphans`).

A server runs in its session's sandbox (DESIGN §4 "The shell", agent/sandbox/): its workdir,
the system read-only, no network but its own loopback, the shell's limits; where the sandbox
cannot be made, a server is refused, never started unsandboxed, unless its entry says
`"sandbox": false` (the operator's explicit choice). Every server is started under
`setpriv --pdeathsig KILL` (and bubblewrap's `--die-with-parent` in the sandbox), so it dies
with the Braid process that started it, and carries `BRAID_MCP_OWNER=<data dir>:<pid>:
<session>` in its environment: at the next start the processes whose owner is this data dir
and whose Braid is gone are killed (what a server left running behind, such as its own
children, included)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from server.agent.mcp_servers.config import StdioServer
from server.agent.sandbox import box
from server.agent.sandbox.limits import Limits

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


def sandbox_argv(entry: StdioServer, workdir: Path, env: dict[str, str],
                 limits: Limits) -> list[str]:
    """The server inside its session's sandbox (agent/sandbox/box.py: the workdir read-write,
    the system read-only, no network, the shell's limits), with its command and the files its
    arguments name visible read-only, each with the installation it belongs to; Refused
    where no sandbox can be made."""
    why = box.why_not()
    if why is not None:
        raise Refused(f"MCP server {entry.name!r} was not started: no sandbox can be made here "
                      f"({why}), and its entry does not say \"sandbox\": false")
    command = shutil.which(entry.command) or entry.command
    argv = [_placed(command), *(_placed(a) if _is_path(a) else a for a in entry.args)]
    # The command's installation where it is named (a venv) and where it really is (the
    # interpreter the venv's `python` links to).
    readonly = {_installation(argv[0]), _installation(os.path.realpath(argv[0])),
                *(Path(a) for a in argv[1:] if _is_path(a))}
    return box.sandboxed_argv(argv, workdir=workdir, env=box.base_env(env),
                              readonly=sorted(p for p in readonly if not _system(p)),
                              limits=limits)


def _is_path(arg: str) -> bool:
    return arg.startswith("/") and os.path.exists(arg)


def _placed(path: str) -> str:
    """A file where it really is (its folder's symlinks resolved), keeping its own name: a
    venv's `bin/python` must stay inside the venv for Python to find its packages."""
    p = Path(path)
    return str(p.parent.resolve() / p.name) if p.is_absolute() else path


def _installation(command: str) -> Path:
    """What a command needs beside itself: the folder above its `bin/` (a venv, a
    node_modules/.bin's package tree), else its own folder."""
    folder = Path(command).parent
    return folder.parent if folder.name in ("bin", ".bin") else folder


def _system(path: Path) -> bool:
    """Shown to every sandbox already (or too wide to show: the root)."""
    text = str(path.resolve())
    return text == "/" or any(text == s or text.startswith(s + "/") for s in box.SYSTEM)


def stdio_params(entry: StdioServer, workdir: Path, data_dir: Path, limits: Limits,
                 session_id: str) -> StdioServerParameters:
    """The server's command line, environment and folder (its session's workdir): in the
    sandbox, or, where the entry says `"sandbox": false`, as the server's own user."""
    from mcp.client.stdio import StdioServerParameters  # the SDK costs ~2 s of CPU to import

    env = {**entry.env, OWNER: f"{owner_of(data_dir)}:{os.getpid()}:{session_id}"}
    argv = sandbox_argv(entry, workdir, env, limits) if entry.sandbox \
        else [entry.command, *entry.args]
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
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
        owner, _, rest = tag.partition(":")
        pid = rest.partition(":")[0]
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
