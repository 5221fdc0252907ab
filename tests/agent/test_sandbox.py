"""The sandbox itself (agent/sandbox/box.py, limits.py), run for real with bubblewrap: what a
command sees and does not, and that its cgroup bounds and ends it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from server.agent.sandbox import box, limits, start
from server.agent.sandbox.limits import Cgroup, Limits


@pytest.fixture
def group() -> Iterator[Cgroup]:
    made = Cgroup.make(Limits(procs=64, memory=256 * 1024**2), "test")
    assert made is not None, limits.why_not()
    yield made
    made.close()
    assert made.pids() == []


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(params=["start", "argv"])
def run(request: pytest.FixtureRequest) -> Run:
    """A script run in the sandbox both ways one is made: `start` (the shell's: bwrap
    started directly, bounded from outside) and `sandboxed_argv` (an MCP server's)."""

    def run(workdir: Path, script: str, cgroup: Cgroup | None = None,
            readonly: tuple[Path, ...] = (), **lim: int) -> subprocess.CompletedProcess[str]:
        argv = ["/bin/bash", "-c", script]
        env = box.base_env({"GREETING": "hi"})
        if request.param == "argv":
            argv = box.sandboxed_argv(argv, workdir=workdir, env=env, readonly=readonly,
                                      limits=Limits(**lim), cgroup=cgroup)
            return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                  check=False)
        # One pipe holds stdout and stderr (as the shell reads them): stderr comes after a NUL.
        split = ["/bin/bash", "-c", f"{{ {script}\n}} 2>/tmp/.stderr; rc=$?; printf '\\0'; "
                 "cat /tmp/.stderr; exit $rc"]
        started = start.start(split, workdir=workdir, env=env, readonly=readonly,
                              limits=Limits(**lim), cgroup=cgroup)
        try:
            said = started.output.read().decode()
            started.proc.wait(120)
        finally:
            started.close()
            started.output.close()
        out, _, err = said.partition("\0")
        return subprocess.CompletedProcess(argv, started.proc.returncode, out, err)
    return run


def test_the_workdir_is_read_write_and_nothing_beside_it_is_seen(run: Run, tmp_path: Path
                                                                  ) -> None:
    work = tmp_path / "session" / "workdir"
    work.mkdir(parents=True)
    (tmp_path / "session" / ".git").mkdir()
    (tmp_path / "session" / ".git" / "config").write_text("[core]\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "secret").write_text("theirs")
    (work / "mine").write_text("ours")
    out = run(work, "cat mine; echo made > new; pwd; ls -a ..; "
              "cat ../.git/config ../../other/secret")
    assert "ours" in out.stdout and str(work) in out.stdout
    assert (work / "new").read_text() == "made\n"
    assert ".git" not in out.stdout and "theirs" not in out.stdout
    assert "No such file" in out.stderr


def test_the_environment_is_made_from_scratch(run: Run, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAID_TOKEN", "server-secret-token")
    out = run(tmp_path, "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; "
              "echo $HOME")
    assert "server-secret-token" not in out.stdout
    assert "GREETING=hi" in out.stdout and "PATH=" in out.stdout
    assert out.stdout.strip().endswith(box.HOME)


def test_home_tmp_and_the_system_are_private_or_read_only(run: Run, tmp_path: Path) -> None:
    marker = Path("/tmp") / f"braid-host-{os.getpid()}"
    marker.write_text("host")
    try:
        out = run(tmp_path, f"ls /tmp; cat {marker}; echo x > ~/.bashrc; echo y > /tmp/t; "
                  "echo z > /etc/braid-test; cat /etc/shadow /root/.bashrc; ls /root; "
                  "id -u; ps -e -o pid= | wc -l")
    finally:
        marker.unlink()
    assert marker.name not in out.stdout
    assert not Path("/etc/braid-test").exists()
    assert "Read-only file system" in out.stderr
    assert "root:" not in out.stdout  # /etc/shadow: masked
    lines = out.stdout.split()
    assert lines[-2] == str(box.UID)
    assert int(lines[-1]) <= 4  # bash, ps, wc and the sandbox's PID 1: nothing of the host


def test_no_network_but_its_own_loopback(run: Run, tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        out = run(tmp_path, f"echo > /dev/tcp/127.0.0.1/{port} && echo reached; "
                  "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1")
    assert "reached" not in out.stdout
    assert out.stdout.split() == ["lo"]


def test_readonly_paths_are_seen_and_not_written(run: Run, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "server.py").write_text("print('mcp')")
    work = tmp_path / "w"
    work.mkdir()
    out = run(work, f"cat {tools}/server.py; echo no > {tools}/server.py", readonly=(tools,))
    assert "print('mcp')" in out.stdout and "Read-only" in out.stderr
    assert (tools / "server.py").read_text() == "print('mcp')"


def test_a_fork_flood_stops_at_the_process_bound(run: Run, tmp_path: Path, group: Cgroup
                                                 ) -> None:
    # Counted with bash's builtins alone: at the bound no `ps` could start.
    out = run(tmp_path, "(for i in $(seq 200); do sleep 30 & done) 2>/dev/null; "
              "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n", cgroup=group,
              procs=64)
    assert 32 < int(out.stdout.split()[-1]) <= 64


def test_memory_past_the_bound_is_killed(run: Run, tmp_path: Path, group: Cgroup) -> None:
    out = run(tmp_path, "python3 -c 'x = bytearray(1024**3); print(len(x))'; echo after",
              cgroup=group, memory=256 * 1024**2)
    assert "1073741824" not in out.stdout and "after" in out.stdout


def test_a_file_larger_than_the_write_bound_stops(run: Run, tmp_path: Path) -> None:
    out = run(tmp_path, "head -c 3000000 /dev/zero > big; echo $?; stat -c %s big",
              write=1024**2)
    assert out.stdout.split()[-1] == str(1024**2)
    assert (tmp_path / "big").stat().st_size == 1024**2


def test_what_a_command_leaves_running_is_killed_with_its_cgroup(run: Run, tmp_path: Path,
                                                                 group: Cgroup) -> None:
    out = run(tmp_path, "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & "
              "(sleep 302 &) ; echo started", cgroup=group)
    assert "started" in out.stdout
    group.kill()
    assert group.pids() == []
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")
                if p.exists() and b"sleep\x00302" in _read(p)]


def test_the_sandbox_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # A starter (the server, here a shell) killed with -9: bwrap's PID 1 gets SIGKILL
    # (--die-with-parent), and with it every process of the sandbox.
    argv = box.sandboxed_argv(["/bin/bash", "-c", "setsid sleep 303 & sleep 304"],
                              workdir=tmp_path, env=box.base_env())
    starter = subprocess.Popen(["/usr/bin/python3", "-c",
                                "import subprocess, sys; subprocess.run(sys.argv[1:])", *argv])
    deadline = time.monotonic() + 20
    while not _sleeping("304") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeping("304")
    starter.kill()
    starter.wait()
    while (_sleeping("303") or _sleeping("304")) and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    assert not _sleeping("303") and not _sleeping("304")


PROBE = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    print(name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()])
import errno
call("add_key", 248, b"user", b"k", b"v", ctypes.c_size_t(1), ctypes.c_int(-2))
call("keyctl", 250, ctypes.c_int(0), ctypes.c_int(-2), ctypes.c_int(0))
call("io_uring_setup", 425, ctypes.c_uint(1), ctypes.create_string_buffer(120))
call("userfaultfd", 323, ctypes.c_int(1))
call("bpf", 321, ctypes.c_int(0), None, ctypes.c_uint(0))
call("perf_event_open", 298, None, 0, -1, -1, 0)
call("unshare", 272, ctypes.c_int(0x10000000))
call("setns", 308, ctypes.c_int(0), ctypes.c_int(0))
call("open_by_handle_at", 304, ctypes.c_int(-100), None, ctypes.c_int(0))
print("tiocsti", "ok" if libc.ioctl(1, 0x5412, b"x") >= 0
      else errno.errorcode[ctypes.get_errno()])
t = threading.Thread(target=lambda: print("thread ran"))
t.start(); t.join()
if os.fork() == 0:
    os._exit(0)
os.wait(); print("fork ran")
call("ptrace", 101, ctypes.c_long(0), 0, 0, 0)  # last: PTRACE_TRACEME stops a later fork
"""
DENIED_HERE = ("add_key", "keyctl", "io_uring_setup", "userfaultfd", "bpf", "perf_event_open",
               "unshare", "setns", "open_by_handle_at", "tiocsti", "ptrace")


def test_the_kernels_riskiest_calls_are_refused(tmp_path: Path) -> None:
    # The seccomp filter (syscalls.py), loaded by bwrap in the shell's way of starting a
    # command: each call answers EPERM, while threads (clone3 -> clone) and fork still work.
    # Without it, in the same namespaces, the key ring, io_uring, userfaultfd and ptrace
    # answer (the `argv` way, an MCP server's, has no filter yet).
    (tmp_path / "probe.py").write_text(PROBE)
    started = start.shell("/usr/bin/python3 probe.py", workdir=tmp_path, env=box.base_env())
    try:
        out = started.output.read().decode()
        started.proc.wait(60)
    finally:
        started.after = None  # no next sandbox for this folder
        started.close()
        started.output.close()
        if started.cgroup is not None:
            started.cgroup.close()
    said = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    refused = {name: said.get(name) for name in DENIED_HERE}
    assert refused == dict.fromkeys(DENIED_HERE, "EPERM"), out
    assert said.get("thread") == "ran" and said.get("fork") == "ran"
    bare = subprocess.run(box.sandboxed_argv(["/usr/bin/python3", "probe.py"], workdir=tmp_path,
                                             env=box.base_env()),
                          capture_output=True, text=True, timeout=60, check=False)
    unfiltered = dict(line.split(" ", 1) for line in bare.stdout.splitlines())
    assert unfiltered.get("add_key") == "ok" and unfiltered.get("userfaultfd") == "ok"


def _finish(sandbox: start.Sandbox) -> str:
    try:
        said = sandbox.output.read().decode()
        sandbox.proc.wait(60)
    finally:
        if sandbox.cgroup is not None:
            sandbox.cgroup.close()
        sandbox.close()
        sandbox.output.close()
    return said


def test_a_sandbox_made_ahead_is_bounded_and_sees_the_folder_as_it_is_now(tmp_path: Path
                                                                         ) -> None:
    # The shell's next command runs in a sandbox made when the last one ended (start.py):
    # it must hold the same bounds, its own cgroup, and the workdir's files of now.
    bounds = Limits(procs=64, memory=256 * 1024**2)
    _finish(start.shell("echo first > one", workdir=tmp_path, env=box.base_env(),
                        limits=bounds))
    assert limits.drain()  # the keeper has made the next one
    (tmp_path / "two").write_text("written after it was made\n")
    asked = time.monotonic()
    second = start.shell("ulimit -u; cat one two; cat /proc/self/cgroup | grep pids; "
                         "(for i in $(seq 200); do sleep 30 & done) 2>/dev/null; "
                         "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n",
                         workdir=tmp_path, env=box.base_env(), limits=bounds)
    second.after = None  # no third one
    assert second.made < asked  # it was made ahead
    lines = _finish(second).split()
    assert lines[0] == "64" and "first" in lines and "after" in lines
    assert any(line.endswith("pids:/") for line in lines)  # its own cgroup, at its root
    assert 32 < int(lines[-1]) <= 64
    for waiting in start.drop_stale(every=True):
        waiting.discard()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _sleeping(seconds: str) -> bool:
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        if _read(path) == b"sleep\x00" + seconds.encode() + b"\x00":
            state = _read(path.with_name("stat")).rpartition(b")")[2].split()[:1]
            if state != [b"Z"]:
                return True
    return False
