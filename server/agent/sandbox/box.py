"""What a sandboxed command sees (DESIGN §4 "The shell"), built by bubblewrap (`bwrap`).

`sandboxed_argv(argv, workdir=..., env=...)` returns the argv that runs `argv` inside:

- its `workdir` read-write at its own path (the cwd), the `readonly` paths read-only, the
  system (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`) read-only, and nothing else of the host:
  no other session, no data dir, no session `.git`, not the server's home;
- a private, size-bounded tmpfs for `/tmp`, `/dev/shm` and `$HOME` (`HOME`), a fresh `/proc`
  and a minimal `/dev`;
- the environment `env` and nothing else: bwrap itself is started by `env -i`, so not even
  the sandbox's PID 1 (bwrap's init) holds the server's environment in `/proc/1/environ`;
- its own user (uid/gid 1000 in a new user namespace: no capability on the host, no further
  user namespace), PID, IPC, UTS, cgroup and network namespace: no process but its own, and
  no network interface but its own loopback (egress.py gives it a proxy on that loopback);
- a new terminal session (no TIOCSTI into the server's terminal), and `--die-with-parent`:
  when the process that started bwrap dies (kill -9 of the server), its PID 1 gets SIGKILL,
  and the kernel kills everything else in its PID namespace. PR_SET_PDEATHSIG follows the
  starting *thread*: start it from a thread that lives as long as the command (the shell's
  own thread, the event loop for an MCP server);
- the bounds of `limits`: with a `Cgroup` (limits.py, the main mechanism), the argv's first
  process joins it before it runs bwrap, so every process of the command is counted (pids,
  memory) and `Cgroup.kill` ends them all; inside the sandbox `prlimit` also sets
  RLIMIT_NPROC (counted per user namespace, so it holds even for a root server),
  RLIMIT_FSIZE (no file larger than `limits.write`) and no core files, plus RLIMIT_AS when
  there is no memory cgroup.

For a long-lived process (an MCP server over stdio), the same call serves: start the argv
with `env={}` or any env (bwrap's own environment is cleared anyway), pipes for stdin and
stdout, `Cgroup.make(limits, "mcp")` before and `Cgroup.close()` after; kill it with
`Cgroup.kill()` (or SIGKILL to the bwrap process: PID 1 dies with it). To give it the
egress proxy, pass `status_fd`/`block_fd` and attach the proxy as shell.py does
(egress.attach). `why_not()` says whether sandboxes can be made here at all.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from server.agent.sandbox.limits import Cgroup, Limits

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
HOME = "/home/sandbox"
UID = 1000
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
DEFAULT = Limits()
# sh joins the cgroups named before `--` (one file per controller), then runs the rest.
_JOIN = 'for f; do shift; [ "$f" = -- ] && break; echo $$ > "$f"; done; exec "$@"'


def bwrap() -> str | None:
    """Where bwrap is (looked up once: a walk of PATH costs ~0.5 ms a command)."""
    if not _bwrap_path:
        _bwrap_path.append(shutil.which("bwrap"))
    return _bwrap_path[0]


_bwrap_path: list[str | None] = []


def base_env(extra: Mapping[str, str] = {}) -> dict[str, str]:  # noqa: B006 - never mutated
    """An environment made from scratch: what a command needs, none of the server's."""
    return {"PATH": PATH, "HOME": HOME, "USER": "sandbox", "LANG": "C.UTF-8", "TERM": "dumb",
            "TMPDIR": "/tmp", **extra}


def _system() -> list[str]:
    if not _system_args:
        args: list[str] = []
        for path in SYSTEM:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        _system_args.extend(args + _masks("/etc"))
    return _system_args


_system_args: list[str] = []


def _masks(top: str) -> list[str]:
    """Hide what only its owner may read under `top`: the sandbox's user is the server's own
    uid on the host (files it writes in the workdir are the server's), so it would be the
    owner of root's `/etc/shadow`, ssh host keys and `/etc/ssl/private` were they shown."""
    masks: list[str] = []
    for folder, dirs, files in os.walk(top):
        for name in [*dirs]:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and (mode & 0o005) != 0o005:
                masks += ["--size", "4096", "--tmpfs", path]
                dirs.remove(name)
        for name in files:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and not mode & 0o004:
                masks += ["--ro-bind", "/dev/null", path]
    return masks


def sandboxed_argv(argv: Sequence[str], *, workdir: Path, env: Mapping[str, str],
                   readonly: Sequence[Path] = (), limits: Limits = DEFAULT,
                   cgroup: Cgroup | None = None, status_fd: int | None = None,
                   block_fd: int | None = None) -> list[str]:
    """The argv that runs `argv` in a sandbox (see the module's docstring). `status_fd`:
    bwrap writes its JSON status there (`child-pid`: the sandbox's PID 1, as the host sees
    it); `block_fd`: the command waits until a byte can be read from it. Both must be
    passed to the child (`pass_fds`). For a caller that can pass no descriptor (an MCP
    server's command line): `start` is the faster way, with the seccomp filter too."""
    box = bwrap_argv(workdir, env, readonly, limits)
    if status_fd is not None:
        box += ["--json-status-fd", str(status_fd)]
    if block_fd is not None:
        box += ["--block-fd", str(block_fd)]
    bounds = [f"--nproc={limits.procs}", f"--fsize={limits.write}", "--core=0"]
    if cgroup is None:
        bounds.append(f"--as={limits.memory}")
    box += ["--", "/usr/bin/prlimit", *bounds, "--", *argv]
    start = ["/usr/bin/env", "-i"]
    if cgroup is not None:
        start += ["/bin/sh", "-c", _JOIN, "sh", *map(str, cgroup.procs_files()), "--"]
    return start + box


def bwrap_argv(workdir: Path, env: Mapping[str, str], readonly: Sequence[Path],
                limits: Limits) -> list[str]:
    """bwrap and its options (what the command sees), up to its `--`."""
    tool = bwrap()
    if tool is None:
        raise FileNotFoundError("bwrap (bubblewrap) is not installed")
    work = os.path.realpath(workdir)
    size = str(max(limits.write, 1024 * 1024))
    box = [tool, "--unshare-all", "--unshare-user", "--uid", str(UID), "--gid", str(UID),
           "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--hostname", "sandbox", *_system(),
           "--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm",
           "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", HOME]
    for path in readonly:
        resolved = os.path.realpath(path)
        box += ["--ro-bind", resolved, resolved]
    box += ["--bind", work, work, "--chdir", work, "--clearenv"]
    for key, value in env.items():
        box += ["--setenv", key, value]
    return box


_verdict: list[str | None] = []


def why_not() -> str | None:
    """None when a sandbox can be made on this machine (bwrap runs `true` in one); else the
    reason, in words for the log and the page. Asked once per process."""
    if not _verdict:
        _verdict.append(_probe())
    return _verdict[0]


def _probe() -> str | None:
    if bwrap() is None:
        return "bubblewrap (bwrap) is not installed"
    if not os.path.exists("/usr/bin/prlimit"):
        return "prlimit (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="braid-probe-") as tmp:
        argv = sandboxed_argv(["/bin/sh", "-c", "true"], workdir=Path(tmp), env=base_env())
        try:
            out = subprocess.run(argv, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bwrap could not start: {e}"
    if out.returncode != 0:
        said = out.stderr.decode(errors="replace").strip().splitlines()
        return "bwrap cannot make a sandbox here" + (f": {said[-1]}" if said else "")
    return None
