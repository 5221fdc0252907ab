"""The shell in its sandbox, through a real server (DESIGN §4 "The shell"): each command the
demo model runs is a real bash in bubblewrap. What it must not reach (another session, the
data dir, the server's home, environment and port, the session's .git, the host's /tmp),
what must not outlive it, and its bounds. Each test fails with today's unsandboxed shell."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TOKEN, Server, WsClient, free_port, git
from server.agent.sandbox import box, limits


@pytest.fixture(scope="module")
def sandbox_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default shell (BRAID_SHELL unset: the sandbox), bounded low enough to test."""
    env = {"BRAID_SHELL_MAX_PROCS": "64", "BRAID_SHELL_MAX_MEMORY": str(512 * 1024**2)}
    srv = Server(data_dir=tmp_path_factory.mktemp("sandbox") / "data", port=free_port(),
                 env=env)
    srv.env["BRAID_SHELL"] = ""
    srv.start()
    yield srv
    srv.stop()


def shell_run(server: Server, sid: str, command: str) -> dict[str, Any]:
    """One turn running `command`: the finished run."""
    return server.run(sid, f"shell {command}\nsay done")


def start(server: Server, sid: str, text: str) -> tuple[WsClient, str]:
    """A turn started over the socket (it runs on while the test looks): (socket, run_id)."""
    ws = server.socket(sid)
    reply = ws.call("send_message", text=text)
    assert reply["type"] == "result", reply
    return ws, str(reply["data"]["run_id"])


def finished(server: Server, sid: str, run_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status, run = server.api("GET", f"/api/runs/{run_id}?session_id={sid}")
        assert status in (200, 404), run  # 404: not committed yet
        if status == 200 and run["status"] != "RUNNING":
            return dict(run)
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def output(run: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in run["messages"] if m["role"] == "tool")


def processes(marker: str) -> list[int]:
    """Live processes of the host whose command line holds `marker`."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in path.read_bytes():
                state = path.with_name("stat").read_text().rpartition(")")[2].split()[0]
                if state != "Z":
                    found.append(int(path.parent.name))
        except OSError:
            continue
    return found


def test_the_shell_is_on_and_sandboxed_by_default(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    run = shell_run(sandbox_server, sid, "echo made > made.txt; id -u; hostname")
    assert run["status"] == "COMPLETED", run
    text = output(run)
    assert "exit code: 0" in text and f"\n{box.UID}\n" in text and "sandbox" in text
    assert git(sandbox_server.session_path(sid), "show", "HEAD:workdir/made.txt") == "made\n"


def test_another_session_the_data_dir_and_the_home_are_not_seen(sandbox_server: Server
                                                               ) -> None:
    first = sandbox_server.new_session()
    assert shell_run(sandbox_server, first, "echo their-secret > secret.txt")["status"] \
        == "COMPLETED"
    theirs = sandbox_server.session_path(first) / "workdir" / "secret.txt"
    assert theirs.read_text() == "their-secret\n"
    data = sandbox_server.data_dir
    sid = sandbox_server.new_session()
    home = Path.home()
    run = shell_run(sandbox_server, sid, f"cat {theirs}; ls {data} {data}/sessions; "
                    f"cat {data}/users.sqlite3 | head -c 100; ls -a {home}; cat {home}/.bashrc; "
                    "ls -a ..")
    text = output(run)
    assert "their-secret\n" not in text.replace(f"{theirs}", "")
    assert f"\n{first}\n" not in text  # `ls sessions`
    assert "SQLite format" not in text and "\nusers.sqlite3\n" not in text
    assert ".git" not in text.split("exit code")[1]  # `ls -a ..`: the workdir's parent
    assert "No such file or directory" in text


def test_the_servers_environment_is_not_seen(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    run = shell_run(sandbox_server, sid, "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; "
                    "ls /proc | grep -c '^[0-9]'")
    text = output(run)
    assert TOKEN not in text and "BRAID_" not in text and "OPENAI" not in text
    assert "PATH=" in text and f"HOME={box.HOME}" in text
    assert int(text.strip().split()[-1]) <= 6  # its own processes only


def test_the_servers_port_is_not_reached(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    port = sandbox_server.port
    run = shell_run(sandbox_server, sid, f"curl -s -m 5 http://127.0.0.1:{port}/api/sessions "
                    f"-H 'Authorization: Bearer {TOKEN}'; echo curl=$?; "
                    f"(echo > /dev/tcp/127.0.0.1:{port}) 2>/dev/null && echo reached")
    text = output(run)
    assert "curl=7" in text and "reached" not in text and "session_id" not in text


def test_host_tmp_and_bashrc_are_not_written(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    name = f"/tmp/braid-escape-{uuid.uuid4().hex}"
    bashrc = Path.home() / ".bashrc"
    before = bashrc.read_bytes() if bashrc.exists() else None
    run = shell_run(sandbox_server, sid, f"echo owned > {name}; echo 'echo owned' >> ~/.bashrc; "
                    f"echo 'echo owned' >> {bashrc}; cat {name} ~/.bashrc")
    assert "owned" in output(run)  # written, in the sandbox's own /tmp and home
    assert not Path(name).exists()
    assert (bashrc.read_bytes() if bashrc.exists() else None) == before


def test_the_sessions_git_config_and_hooks_are_not_reached(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    repo = sandbox_server.session_path(sid)
    config = (repo / ".git" / "config").read_bytes()
    run = shell_run(sandbox_server, sid, f"echo '[core] fsmonitor = touch /tmp/x' >> "
                    f"{repo}/.git/config; mkdir -p {repo}/.git/hooks; "
                    f"echo 'touch /tmp/pwned' > {repo}/.git/hooks/post-commit; "
                    "echo x >> ../.git/config; git status")
    assert run["status"] == "COMPLETED", run
    assert (repo / ".git" / "config").read_bytes() == config
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    assert "not a git repository" in output(run)


def test_nothing_it_starts_outlives_it(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    run = shell_run(sandbox_server, sid, "setsid sleep 4711 & nohup sleep 4712 >/dev/null 2>&1 "
                    "& (sleep 4713 &); setsid -f env -i sleep 4714; echo started")
    assert "started" in output(run)
    deadline = time.monotonic() + 10
    while any(processes(f"sleep\0{n}") for n in range(4711, 4715)):
        assert time.monotonic() < deadline, "a process outlived its command"
        time.sleep(0.1)


def test_stop_kills_the_whole_command(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    ws, run_id = start(sandbox_server, sid, "shell setsid sleep 4721 & sleep 4722\nsay done")
    deadline = time.monotonic() + 60
    while not processes("sleep\x004722"):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    assert ws.call("cancel_run", run_id=run_id)["type"] == "result"
    ws.close()
    assert finished(sandbox_server, sid, run_id)["status"] == "CANCELLED"
    while processes("sleep\x004721") or processes("sleep\x004722"):
        assert time.monotonic() < deadline, "a process outlived Stop"
        time.sleep(0.05)


def test_a_fork_flood_is_bounded_and_another_session_still_answers(sandbox_server: Server
                                                                  ) -> None:
    flood = sandbox_server.new_session()
    ws, run_id = start(sandbox_server, flood, "shell (for i in $(seq 500); do sleep 4731 & done) "
                                "2>/dev/null; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; "
                                "echo procs=$n; sleep 3\nsay done")
    deadline = time.monotonic() + 60
    while not processes("sleep\x004731"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    other = sandbox_server.new_session()
    assert sandbox_server.run(other, "say still here")["status"] == "COMPLETED"
    ws.close()
    text = output(finished(sandbox_server, flood, run_id))
    count = int(text.split("procs=")[1].split()[0])
    assert 32 < count <= 64  # BRAID_SHELL_MAX_PROCS of this server
    while processes("sleep\x004731"):
        assert time.monotonic() < deadline + 30
        time.sleep(0.1)


def test_memory_past_the_bound_is_killed(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    run = shell_run(sandbox_server, sid, "python3 -c 'x = bytearray(6 * 1024**3); "
                    "print(\"held\", len(x))'; echo after=$?")
    text = output(run)
    assert "held 6" not in text and "after=" in text and "after=0" not in text
    assert run["status"] == "COMPLETED"


def test_a_sub_agents_command_runs_sandboxed_in_its_worktree(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    parent = shell_run(sandbox_server, sid, "echo parent > p.txt")
    status, body = sandbox_server.api(
        "POST", f"/api/sessions/{sid}/sub_agents",
        {"parent_turn_id": parent["run_id"], "label": "kid",
         "prompt": "shell pwd; cat p.txt; ls -a ..; env | grep -c BRAID_; echo kid > k.txt\n"
                   "say ok"})
    assert status == 200, body
    runs = sandbox_server.settled_runs(sid, 2)
    child = next(r for r in runs if r["run_id"] != parent["run_id"])
    run = finished(sandbox_server, sid, child["run_id"])
    text = output(run)
    assert "_worktrees" in text and "parent" in text
    assert ".git" not in text.split("exit code")[1] and "\n0\n" in text
    branch = run["branch"]
    assert git(sandbox_server.session_path(sid), "show", f"{branch}:workdir/k.txt") == "kid\n"


def test_the_shell_mode_is_checked(tmp_path: Path) -> None:
    from server.base.settings import Settings

    assert Settings.from_env({}).shell_mode == "sandbox"
    assert Settings.from_env({"BRAID_SHELL": "on"}).shell_mode == "sandbox"
    assert Settings.from_env({"BRAID_SHELL": "host"}).shell_mode == "host"
    assert not Settings.from_env({"BRAID_SHELL": "off"}).shell
    with pytest.raises(ValueError, match="BRAID_SHELL"):
        Settings.from_env({"BRAID_SHELL": "maybe"})
    assert json.dumps(os.environ.get("BRAID_SHELL", ""))  # the suite's own choice is kept


def test_output_streams_as_it_comes_and_a_page_opened_meanwhile_shows_it(
        sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    ws, run_id = start(sandbox_server, sid, "shell for i in 1 2 3; do echo line$i; sleep 1; "
                       "done; echo marker-4761 > /dev/null; sleep 4761\nsay done")
    pieces: list[str] = []
    while "line3" not in "".join(pieces):
        frame = ws.until(lambda f: f.get("event") in ("tool_output", "tool_result"), timeout=60)
        assert frame["event"] == "tool_output", "the output came only with the result"
        assert frame["data"]["run_id"] == run_id and frame["data"]["call_id"]
        pieces.append(frame["data"]["text"])
    assert len(pieces) >= 2 and "".join(pieces) == "line1\nline2\nline3\n"
    status, page = sandbox_server.page(f"/s/{sid}")  # a reload mid-command
    assert status == 200 and "line1\nline2\nline3" in page
    assert ws.call("cancel_run", run_id=run_id)["type"] == "result"
    ws.close()


def test_long_output_is_bounded_in_the_page_and_the_record(sandbox_server: Server) -> None:
    sid = sandbox_server.new_session()
    ws, run_id = start(sandbox_server, sid, "shell head -c 3000000 /dev/zero | tr '\\0' x; "
                       "echo; echo the-end\nsay done")
    streamed = 0
    while True:
        frame = ws.until(lambda f: f.get("event") in ("tool_output", "run_completed"),
                         timeout=120)
        if frame["event"] == "run_completed":
            break
        streamed += len(frame["data"]["text"])
    ws.close()
    assert 200_000 < streamed < 300_000  # 256 KiB, then a line saying the rest is left out
    text = output(finished(sandbox_server, sid, run_id))
    assert "the-end" in text and "bytes of output omitted" in text and len(text) < 25_000


def test_bytes_written_stop_at_the_bound(server_factory: Any, disk_path: Path) -> None:
    # 3 GiB asked for, against a bound of 64 MiB (BRAID_SHELL_MAX_WRITE; 2 GiB by default):
    # one big file stops at the bound (RLIMIT_FSIZE), /tmp is a tmpfs of that size, and many
    # files together end the command (its processes' I/O accounting is watched). On a disk:
    # a RAM file system's files are the writer's memory, which its own bound stops first.
    bound = 64 * 1024**2
    srv = server_factory(disk_path / "data", BRAID_SHELL="sandbox",
                         BRAID_SHELL_MAX_WRITE=str(bound))
    sid = srv.new_session()
    run = shell_run(srv, sid, "head -c 3G /dev/zero > big; ls -l big; "
                    "head -c 3G /dev/zero > /tmp/big; ls -l /tmp/big")
    work = srv.session_path(sid) / "workdir"
    assert (work / "big").stat().st_size <= bound
    text = output(run)
    assert "File size limit exceeded" in text or "No space left" in text
    run = shell_run(srv, sid, "rm -f big; for i in $(seq 48); do head -c 64M /dev/zero "
                    "> part$i 2>/dev/null; done; echo wrote-all")
    text = output(run)
    assert "wrote-all" not in text and f"wrote more than {bound} bytes" in text
    written = sum(p.stat().st_size for p in work.glob("part*"))
    assert written < 3 * 1024**3


def test_where_no_sandbox_can_be_made_the_shell_is_not_offered(server_factory: Any,
                                                               tmp_path: Path) -> None:
    # A bwrap that cannot make a sandbox (as where user namespaces are off): never a
    # command run unsandboxed instead; the log and the page say why.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'setting up uid map: Permission denied' >&2\n"
                                "exit 1\n")
    (fake / "bwrap").chmod(0o755)
    srv = server_factory(BRAID_SHELL="sandbox", PATH=f"{fake}:{os.environ['PATH']}")
    sid = srv.new_session()
    run = srv.run(sid, "shell echo ran > ran.txt")
    assert [m["role"] for m in run["messages"]] == ["user", "assistant"]
    assert not (srv.session_path(sid) / "workdir" / "ran.txt").exists()
    status, page = srv.page(f"/s/{sid}")
    assert status == 200 and 'id="shell-off"' in page and "Permission denied" in page
    assert srv.log_path is not None
    assert "the shell is not offered" in srv.log_path.read_text()


def test_a_clean_stop_leaves_no_sandbox_and_no_cgroup(server_factory: Any) -> None:
    # After a command the next one's sandbox is made ahead and waits (agent/sandbox/start.py);
    # a clean stop ends it and removes every cgroup of the server's.
    srv = server_factory(BRAID_SHELL="sandbox")
    sid = srv.new_session()
    assert "marker-4741" in output(shell_run(srv, sid, "echo marker-4741"))
    pid = srv.proc.pid
    deadline = time.monotonic() + 30
    while not [p for p in processes("--args") if _parent(p) == pid]:
        assert time.monotonic() < deadline, "no sandbox was made ahead"
        time.sleep(0.05)
    waiting = [p for p in processes("--args") if _parent(p) == pid]
    homes = [Path("/sys/fs/cgroup") / c for c in limits.CONTROLLERS]
    assert any(h.glob(f"**/{limits.PREFIX}{pid}-*") for h in homes)
    srv.stop()
    assert not [p for p in waiting if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0] != "Z"]
    assert not [g for h in homes for g in h.glob(f"**/{limits.PREFIX}{pid}-*")]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
