"""MCP servers' tools in turns (DESIGN §4 "MCP tools"), against a real MCP server written for
the tests on the official SDK (tests/fixtures/mcp_server.py), over stdio and over
streamable HTTP on loopback, driven by the demo model's `call TOOL JSON` line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import call_action, git, mcp_http_server, new_session, next_event, run_turn
from server.agent.mcp_servers import config
from server.agent.mcp_servers.launch import OWNER, owner_of, sweep_orphans
from server.agent.sandbox import box
from server.app.braid import Braid
from server.base.errors import BadRequest, Forbidden
from server.features import revert, search, session_meta
from server.store.users import DEFAULT_USER

USER = DEFAULT_USER
SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"
MakeBraid = Callable[..., Awaitable[Braid]]


def servers_file(tmp_path: Path, **entries: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": entries}))
    return path


def stdio(**extra: Any) -> dict[str, Any]:
    """The test server over stdio, in the session's sandbox (the default)."""
    return {"command": sys.executable, "args": [str(SERVER)], **extra}




@pytest.fixture
async def mcp_braid(make_braid: MakeBraid, tmp_path: Path) -> Braid:
    return await make_braid(mcp_file=servers_file(tmp_path, files=stdio()), mcp_timeout=15.0)


def tool_messages(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in run["messages"] if m["role"] == "tool"]


def instance_of(run: dict[str, Any]) -> str:
    """Which server process answered `whoami` (its pid is its sandbox's, not the host's)."""
    text = tool_messages(run)[0]["content"]
    found = re.search(r"instance (\w+)", text)
    assert found, text
    return found.group(1)


def host_pids(session_id: str) -> set[int]:
    """The host's ids of the session's MCP server processes (found by their owner tag)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if any(item.startswith(f"{OWNER}=".encode()) and item.endswith(f":{session_id}".encode())
               for item in environ.split(b"\0")):
            found.add(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def gone(pids: set[int], within: float = 10.0) -> bool:
    """Whether the processes end within `within` seconds (the loop goes on meanwhile: the
    idle sweep runs on it)."""
    assert pids
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(map(alive, pids)):
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.slow
async def test_a_call_reaches_the_stdio_server_in_the_sessions_workdir(mcp_braid: Braid) -> None:
    sid, path = await new_session(mcp_braid)
    run = await run_turn(mcp_braid, sid, "call mcp__files__whoami {}")
    assert run["status"] == "COMPLETED", run.get("error")
    [result] = tool_messages(run)
    assert not result.get("is_error"), result
    assert result["name"] == "mcp__files__whoami"
    assert result["content"].endswith(f"in {path / 'workdir'}")
    assert run["messages"][-1]["content"] == "done: called mcp__files__whoami"
    # The call and its result are in the turn's record, committed, as any tool's.
    assert git(path, "grep", "-l", "mcp__files__whoami", "HEAD", "--", "history").strip()
    # The same server answers the session's next call (started once, on first use).
    again = await run_turn(mcp_braid, sid, "call mcp__files__whoami {}")
    assert instance_of(again) == instance_of(run)
    assert len(host_pids(sid)) == 1


@pytest.mark.slow
async def test_a_sub_agents_call_reaches_a_server_in_its_own_worktree(mcp_braid: Braid) -> None:
    sid, path = await new_session(mcp_braid)
    events = mcp_braid.bus.subscribe(sid)
    run = await run_turn(mcp_braid, sid, "spawn kid: call mcp__files__whoami {}")
    assert run["status"] == "COMPLETED", run.get("error")
    seen = []
    while not events.empty():
        frame = events.get_nowait()
        if frame["event"] == "tool_result" and frame["data"].get("branch"):
            seen.append(frame["data"]["message"]["content"])
    [child] = [c for c in seen if "instance" in c]
    where = child.rpartition(" in ")[2]
    assert "/_worktrees/" in where and where.endswith("/workdir")
    assert where != str(path / "workdir")
    # The child's server ended with its worktree (the parent's, started to list the tools
    # for its own model call, goes on).
    assert {str(c.workdir) for c in mcp_braid.mcp.live(sid)} <= {str(path / "workdir")}


@pytest.mark.slow
async def test_the_sessions_tools_are_listed_with_their_cost_and_switched_off(
        mcp_braid: Braid) -> None:
    sid, _ = await new_session(mcp_braid)
    listed = await call_action(mcp_braid, USER, sid, "list_tools")
    by_name = {t["name"]: t for t in listed["tools"]}
    assert {"read_file", "mcp__files__read", "mcp__files__write"} <= set(by_name)
    read, write = by_name["mcp__files__read"], by_name["mcp__files__write"]
    assert read["server"] == "files" and read["read_only"] and not write["read_only"]
    assert read["description"].startswith("Read a text file")
    # Every definition offered costs what the Tools list says, built-in ones too.
    assert read["tokens"] > 0 and by_name["read_file"]["tokens"] > 0
    assert by_name["read_file"]["server"] is None and not read["off"]

    info = await call_action(mcp_braid, USER, sid, "update_session",
                             tools_off=["mcp__files__write"])
    assert info["tools_off"] == ["mcp__files__write"]
    listed = await call_action(mcp_braid, USER, sid, "list_tools")
    assert [t["name"] for t in listed["tools"] if t["off"]] == ["mcp__files__write"]
    # The model is not offered it; a call all the same is refused, nothing written.
    run = await run_turn(mcp_braid, sid, 'call mcp__files__write {"path": "x.txt", "text": "x"}')
    [result] = tool_messages(run)
    assert result["is_error"] and "switched off" in result["content"]
    assert run["status"] == "COMPLETED"
    with pytest.raises(BadRequest):
        await call_action(mcp_braid, USER, sid, "update_session", tools_off="write")


@pytest.mark.slow
async def test_the_tools_definitions_count_in_the_context_budget(make_braid: MakeBraid,
                                                                  tmp_path: Path) -> None:
    plain = await make_braid(data_dir=tmp_path / "plain")
    sid, _ = await new_session(plain)
    without = await run_turn(plain, sid, "hello")
    braid = await make_braid(data_dir=tmp_path / "mcp",
                             mcp_file=servers_file(tmp_path, files=stdio()))
    sid2, path2 = await new_session(braid)
    with_mcp = await run_turn(braid, sid2, "hello")
    listed = await call_action(braid, USER, sid2, "list_tools")
    cost = sum(t["tokens"] for t in listed["tools"])
    mcp_cost = sum(t["tokens"] for t in listed["tools"] if t["server"])
    used = json.loads(git(path2, "show", f"HEAD:runs/000/00/{with_mcp['run_id']}.json"))
    used_plain = json.loads(git(plain.store.path(sid), "show",
                                f"HEAD:runs/000/00/{without['run_id']}.json"))
    assert used["context"]["parts"]["tools"] == cost
    assert used["context"]["tokens"] - used_plain["context"]["tokens"] == mcp_cost > 0


@pytest.mark.slow
async def test_the_compaction_check_counts_the_mcp_tools_too(make_braid: MakeBraid,
                                                              tmp_path: Path) -> None:
    """A turn opens with a compaction when its call would leave messages out: with MCP
    servers' definitions taking their share of the budget, never a dropped message first."""
    braid = await make_braid(context_tokens=2500, mcp_file=servers_file(tmp_path, files=stdio()),
                             mcp_timeout=15.0)
    sid, path = await new_session(braid)
    listed = await call_action(braid, USER, sid, "list_tools")
    assert sum(t["tokens"] for t in listed["tools"] if t["server"]) > 250
    filler = "lorem ipsum dolor sit amet " * 12
    for i in range(16):
        done = await run_turn(braid, sid, f"say m{i}\n{filler}")
        assert done["status"] == "COMPLETED"
        assert done["context"]["omitted_messages"] == 0, (i, done["context"])
        assert done["context"]["tokens"] <= 2500
    kinds = git(path, "log", "--format=%(trailers:key=Braid-Kind,valueonly)").split()
    assert "compaction" in kinds


@pytest.mark.slow
async def test_a_tool_writing_in_its_cwd_makes_a_checkpoint_revert_undoes(
        mcp_braid: Braid) -> None:
    sid, path = await new_session(mcp_braid)
    run = await run_turn(mcp_braid, sid,
                         'call mcp__files__write {"path": "made.txt", "text": "by mcp"}')
    assert run["status"] == "COMPLETED"
    assert (path / "workdir/made.txt").read_text() == "by mcp"
    assert git(path, "show", "HEAD:workdir/made.txt") == "by mcp"
    assert git(path, "status", "--porcelain") == ""
    files = await revert.list_turn_files(mcp_braid, USER, sid, run["run_id"])
    assert files["paths"] == [{"path": "made.txt", "status": "added"}]
    # Searchable as any turn: its request and its answer are found by their words.
    hits = await search.search(mcp_braid, USER, "called mcp__files__write", 10)
    assert any(h["session_id"] == sid for h in hits["results"]), hits
    await revert.revert_turn(mcp_braid, USER, sid, run["run_id"])
    assert not (path / "workdir/made.txt").exists()
    assert "made.txt" not in git(path, "ls-tree", "-r", "--name-only", "HEAD")


@pytest.mark.slow
async def test_writes_approvals_ask_for_a_write_tool_and_not_for_a_read_only_one(
        mcp_braid: Braid) -> None:
    sid, path = await new_session(mcp_braid)
    (path / "workdir/seen.txt").write_text("seen")
    await call_action(mcp_braid, USER, sid, "update_session", approvals="writes")
    read = await run_turn(mcp_braid, sid, 'call mcp__files__read {"path": "seen.txt"}')
    assert tool_messages(read)[0]["content"] == "seen"  # no question asked

    events = mcp_braid.bus.subscribe(sid)
    from server.agent.turns import send_message

    run_id = await send_message(mcp_braid, USER, sid,
                                'call mcp__files__write {"path": "w.txt", "text": "w"}')
    asked = await next_event(events, "approval_needed")
    assert asked["tool"] == "mcp__files__write" and asked["args"] == {"path": "w.txt",
                                                                       "text": "w"}
    assert not (path / "workdir/w.txt").exists()
    await session_meta.approve_tool_call(mcp_braid, USER, sid, run_id, asked["call_id"],
                                         "deny", "no")
    await next_event(events, "run_completed")
    assert not (path / "workdir/w.txt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["crash", "garbage", "hang"])
async def test_a_failing_server_gives_an_error_result_and_the_run_completes(
        mcp_braid: Braid, tool: str) -> None:
    sid, _ = await new_session(mcp_braid)
    first = await run_turn(mcp_braid, sid, "call mcp__files__whoami {}")
    before, pids = instance_of(first), host_pids(sid)
    run = await run_turn(mcp_braid, sid, f"call mcp__files__{tool} {{}}\nsay went on")
    assert run["status"] == "COMPLETED"
    [result] = tool_messages(run)
    assert result["is_error"] and result["content"].startswith("error: MCP server 'files'")
    if tool == "hang":
        assert "did not answer within 15s" in result["content"]
    assert run["messages"][-1]["content"] == "went on"
    assert await gone(pids)  # the failed server is stopped, the next call starts another
    again = await run_turn(mcp_braid, sid, "call mcp__files__whoami {}")
    assert not tool_messages(again)[0].get("is_error")
    assert instance_of(again) != before


@pytest.mark.slow
async def test_stop_cancels_a_call_in_flight(mcp_braid: Braid) -> None:
    sid, _ = await new_session(mcp_braid)
    first = await run_turn(mcp_braid, sid, "call mcp__files__whoami {}")
    assert instance_of(first)
    pids = host_pids(sid)
    events = mcp_braid.bus.subscribe(sid)
    from server.agent.turns import cancel_run, send_message

    run_id = await send_message(mcp_braid, USER, sid, "call mcp__files__hang {}")
    await next_event(events, "tool_call")
    await asyncio.sleep(0.3)
    await cancel_run(mcp_braid, USER, sid, run_id)
    done = await next_event(events, "run_cancelled")
    assert done["status"] == "CANCELLED"
    [result] = [m for m in done["messages"] if m["role"] == "tool"]
    assert result["is_error"]
    assert await gone(pids)


@pytest.mark.slow
async def test_two_users_never_share_a_server_process(mcp_braid: Braid) -> None:
    mcp_braid.users.set_token("bob")
    mine, _ = await new_session(mcp_braid)
    theirs, _ = await new_session(mcp_braid, "bob")
    a = await run_turn(mcp_braid, mine, "call mcp__files__whoami {}")
    b = await run_turn(mcp_braid, theirs, "call mcp__files__whoami {}", user_id="bob")
    assert instance_of(a) != instance_of(b)
    pids_a, pids_b = host_pids(mine), host_pids(theirs)
    assert pids_a and pids_b and not pids_a & pids_b
    # Deleting a session stops its server; the other user's goes on.
    await session_meta.delete_session(mcp_braid, "bob", theirs)
    assert await gone(pids_b) and not await gone(pids_a, within=0.2)


@pytest.mark.slow
async def test_an_idle_server_is_stopped_and_started_again_on_the_next_call(
        make_braid: MakeBraid, tmp_path: Path) -> None:
    braid = await make_braid(mcp_file=servers_file(tmp_path, files=stdio()), idle_seconds=3)
    sid, _ = await new_session(braid)
    first = instance_of(await run_turn(braid, sid, "call mcp__files__whoami {}"))
    assert await gone(host_pids(sid), within=15)
    second = await run_turn(braid, sid, "call mcp__files__whoami {}")
    assert instance_of(second) != first


@pytest.mark.slow
async def test_a_server_that_will_not_start_is_an_error_result(make_braid: MakeBraid,
                                                                tmp_path: Path) -> None:
    broken = {"command": sys.executable, "args": ["-c", "import sys; print('nope', "
                                                  "file=sys.stderr); sys.exit(2)"],
              "sandbox": False}
    braid = await make_braid(mcp_file=servers_file(tmp_path, files=stdio(), broken=broken),
                             mcp_timeout=5.0)
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "call mcp__broken__anything {}")
    assert run["status"] == "COMPLETED"
    [result] = tool_messages(run)
    assert result["is_error"] and "did not start" in result["content"]
    assert "nope" in result["content"]  # its stderr, to say why
    listed = await call_action(braid, USER, sid, "list_tools")
    assert "broken" in listed["unavailable"]
    assert any(t["server"] == "files" for t in listed["tools"])


@pytest.mark.slow
async def test_the_sandboxed_server_cannot_read_another_session_or_the_home(
        mcp_braid: Braid) -> None:
    mine, my_path = await new_session(mcp_braid)
    (my_path / "workdir/mine.txt").write_text("my own")
    own = await run_turn(mcp_braid, mine, 'call mcp__files__read {"path": "mine.txt"}')
    assert tool_messages(own)[0]["content"] == "my own"
    other, other_path = await new_session(mcp_braid)
    (other_path / "workdir/secret.txt").write_text("other session's")
    home_file = Path.home() / ".braid-mcp-test-secret"
    home_file.write_text("the server's home")
    try:
        for path in (other_path / "workdir/secret.txt", home_file,
                     mcp_braid.data_dir / "token"):
            run = await run_turn(mcp_braid, mine,
                                 f"call mcp__files__read {json.dumps({'path': str(path)})}")
            [result] = tool_messages(run)
            assert result["is_error"], result  # not there: the sandbox shows neither
            assert "other session's" not in result["content"]
            assert "home" not in result["content"] and run["status"] == "COMPLETED"
    finally:
        home_file.unlink()
    # What the operator runs unsandboxed ("sandbox": false) is the server's own user.
    assert config.parse({"mcpServers": {"x": stdio(sandbox=False)}})["x"].sandbox is False


@pytest.mark.slow
async def test_a_sandboxed_server_is_refused_where_no_sandbox_can_be_made(
        make_braid: MakeBraid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(box, "why_not", lambda: "bubblewrap (bwrap) is not installed")
    braid = await make_braid(mcp_file=servers_file(tmp_path, boxed=stdio()))
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "call mcp__boxed__whoami {}")
    [result] = tool_messages(run)
    assert result["is_error"] and "no sandbox can be made here" in result["content"]
    assert "bwrap" in result["content"] and "sandbox\": false" in result["content"]
    assert run["status"] == "COMPLETED"


# -- streamable HTTP on loopback ------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    with mcp_http_server(tmp_path / "http-server") as url:
        yield url


@pytest.mark.slow
async def test_a_call_reaches_an_http_server_the_operator_allowed(
        make_braid: MakeBraid, tmp_path: Path, http_server: str) -> None:
    braid = await make_braid(mcp_file=servers_file(tmp_path, web={"url": http_server}),
                             mcp_hosts=("127.0.0.1",), mcp_timeout=10.0)
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "call mcp__web__whoami {}")
    [result] = tool_messages(run)
    assert not result.get("is_error"), result
    assert result["content"].endswith("http-server")
    # No checkpoint work for a remote server: nothing of the workdir changed.
    assert run["status"] == "COMPLETED"


@pytest.mark.slow
async def test_an_http_server_on_a_private_host_is_refused_unless_listed(
        make_braid: MakeBraid, tmp_path: Path, http_server: str) -> None:
    braid = await make_braid(mcp_file=servers_file(tmp_path, web={"url": http_server}))
    sid, _ = await new_session(braid)
    run = await run_turn(braid, sid, "call mcp__web__whoami {}")
    [result] = tool_messages(run)
    assert result["is_error"] and "BRAID_MCP_HOSTS" in result["content"]
    with pytest.raises(Forbidden):
        config.check_url((), "http://example.com/mcp")
    with pytest.raises(Forbidden):
        config.check_url((), "https://127.0.0.1/mcp")
    with pytest.raises(BadRequest):
        config.check_url((), "https://user:pw@example.com/mcp")
    assert config.check_url(("127.0.0.0/8",), "http://127.0.0.1:1/mcp")


# -- the configuration ----------------------------------------------------------------------


def test_a_bad_configuration_is_refused_with_what_is_wrong() -> None:
    good = config.parse({"mcpServers": {"a-b_c": {"command": "x", "args": ["1"],
                                                  "env": {"K": "v"}},
                                        "web": {"url": "https://h/mcp",
                                                "headers": {"Authorization": "Bearer t"}}}})
    assert isinstance(good["a-b_c"], config.StdioServer) and good["a-b_c"].sandbox
    assert isinstance(good["web"], config.HttpServer)
    for bad, words in [({}, "mcpServers"), ({"mcpServers": {"a__b": {"command": "x"}}}, "name"),
                       ({"mcpServers": {"a": {"command": ""}}}, "command"),
                       ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "args"),
                       ({"mcpServers": {"a": {"command": "x", "sandbox": "no"}}}, "sandbox"),
                       ({"mcpServers": {"a": {"url": "u", "headers": {"a": 1}}}}, "headers"),
                       ({"mcpServers": {"a": {}}}, "command")]:
        with pytest.raises(BadRequest, match=words):
            config.parse(bad)
    assert config.tool_name("s", "t") == "mcp__s__t"
    assert config.tool_name("s", "a.b") is None
    assert config.split_name("mcp__s__t__u") == ("s", "t__u")
    assert config.split_name("read_file") is None


def test_a_server_left_by_a_killed_braid_is_swept_at_the_next_start(tmp_path: Path) -> None:
    # A process tagged by an earlier Braid on this data dir whose Braid is gone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    env = {**os.environ, OWNER: f"{owner_of(tmp_path)}:{dead.pid}"}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    # One of a live Braid (this process) and one of another data dir are left alone.
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**env, OWNER: f"{owner_of(tmp_path)}:{os.getppid()}"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**env, OWNER: f"{owner_of(tmp_path / 'x')}:{dead.pid}"})
    try:
        killed = sweep_orphans(tmp_path)
        assert killed == [orphan.pid]
        assert orphan.wait(10) == -signal.SIGKILL
        assert mine.poll() is None and other.poll() is None
    finally:
        for proc in (orphan, mine, other):
            proc.kill()
            proc.wait()
