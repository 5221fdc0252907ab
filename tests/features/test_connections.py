"""A user's own connections (features/connections/): a model endpoint added against a real
OpenAI-compatible server on loopback (the replay server) that the operator allowed, its
models in that user's picker only, a turn on it with the user's key; an HTTP MCP server
(the tests' real one) whose tools are offered in that user's sessions only. Keys and headers
never come back out: not in an answer, not in a session's repository, not in the data dir
beside the users file. Bad input is a clear error with a code and keeps nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port, mcp_http_server, new_session, run_turn
from server.app.braid import Braid
from server.base.errors import BraidError
from server.features import model_choice, session_meta
from server.features.connections.own import list_connections
from server.web.actions import by_name
from server.web.specs import parse_params
from tests.model_replay import ReplayServer, text_stream

MakeBraid = Callable[..., Awaitable[Braid]]
KEY = "sk-ann-0123456789-secret"
HEADER = "Bearer mcp-ann-0123456789-secret"


async def act(braid: Braid, user_id: str, action_name: str, **raw: Any) -> Any:
    """A user-level action as a client sends it: parsed by its declaration, then called."""
    action = by_name(action_name)
    return await action.call(braid, user_id, **parse_params(action, raw, http=True))


async def code_of(call: Awaitable[Any]) -> str:
    with pytest.raises(BraidError) as info:
        await call
    return info.value.code


def secrets_on_disk(data_dir: Path, *secrets: str) -> list[str]:
    """Files of the data dir (the users file aside) and git objects of its sessions that
    hold one of `secrets`."""
    found = []
    for path in data_dir.rglob("*"):
        if path.is_file() and not path.name.startswith("users.sqlite3"):
            data = path.read_bytes()
            found += [str(path) for s in secrets if s.encode() in data]
    for repo in (data_dir / "sessions").iterdir():
        objects = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch-all-objects",
                                  "--batch"], capture_output=True, check=True).stdout
        found += [f"{repo} objects" for s in secrets if s.encode() in objects]
    return found


async def test_a_users_endpoint_is_theirs_a_turn_runs_on_it_with_their_key_kept_out_of_sight(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    replay.models = ["smollm2", "tiny"]
    replay.default = text_stream("hello from the loopback model")
    braid = await make_braid(endpoint_hosts=("127.0.0.1",))
    view = await act(braid, "ann", "add_connection", kind="model", name="mine",
                     url=replay.base_url + "/", key=KEY)
    assert view == {"kind": "model", "name": "mine", "url": replay.base_url,
                    "models": ["smollm2", "tiny"], "secret_set": True,
                    "created_at": view["created_at"]}
    assert replay.requests == []  # listing models is a GET: nothing posted
    listed = await act(braid, "ann", "list_connections")
    assert listed == {"connections": [view]} and KEY not in json.dumps(listed)

    # Its models are in ann's picker, not in bob's.
    refs = {m.get("ref") for m in (await model_choice.list_models(braid, "ann"))["models"]}
    assert {"smollm2@mine", "tiny@mine"} <= refs
    refs = {m.get("ref") for m in (await model_choice.list_models(braid, "bob"))["models"]}
    assert not {"smollm2@mine", "tiny@mine"} & refs

    sid, path = await new_session(braid, "ann")
    await session_meta.update_session(braid, "ann", sid, {"model": "tiny@mine"})
    run = await run_turn(braid, sid, "hi", user_id="ann")
    assert run["status"] == "COMPLETED", run
    assert run["endpoint"] == "mine" and run["model"] == "tiny"
    assert run["messages"][-1]["content"] == "hello from the loopback model"
    [sent] = replay.requests
    assert sent["model"] == "tiny" and sent["_headers"]["authorization"] == f"Bearer {KEY}"

    # Bob can neither choose ann's endpoint nor remove it.
    his, _ = await new_session(braid, "bob")
    assert await code_of(session_meta.update_session(
        braid, "bob", his, {"model": "tiny@mine"})) == "bad_request"
    assert await code_of(act(braid, "bob", "remove_connection", kind="model",
                             name="mine")) == "not_found"
    assert (await list_connections(braid, "bob"))["connections"] == []

    assert secrets_on_disk(braid.data_dir, KEY) == []
    assert (await act(braid, "ann", "remove_connection", kind="model", name="mine")
            ) == {"connections": []}
    assert path.is_dir()


async def test_bad_input_is_a_clear_error_with_a_code_and_keeps_nothing(
        make_braid: MakeBraid, replay: ReplayServer) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    strict = await make_braid()  # the operator allowed no host of its own network
    assert await code_of(act(strict, "ann", "add_connection", kind="model", name="m",
                             url=replay.base_url)) == "forbidden"
    assert await code_of(act(strict, "ann", "add_connection", kind="model", name="m",
                             url="https://127.0.0.1:9/v1")) == "forbidden"
    assert await code_of(act(strict, "ann", "add_connection", kind="mcp", name="m",
                             url="http://127.0.0.1:9/mcp")) == "forbidden"
    braid = await make_braid(endpoint_hosts=("127.0.0.0/8",), mcp_hosts=("127.0.0.1",))
    bad: list[dict[str, Any]] = [
        {"kind": "tool", "name": "m", "url": replay.base_url},
        {"kind": "model", "name": "demo", "url": replay.base_url},
        {"kind": "model", "name": "a@b", "url": replay.base_url},
        {"kind": "model", "name": "m", "url": "https://u:p@example.com/v1"},
        {"kind": "model", "name": "m", "url": replay.base_url, "key": 5},
        {"kind": "model", "name": "m", "url": replay.base_url, "key": "a\nb"},
        {"kind": "model", "name": "m", "url": replay.base_url, "models": ["a b"]},
        {"kind": "mcp", "name": "a__b", "url": "http://127.0.0.1:9/mcp"},
        {"kind": "mcp", "name": "m", "url": "http://127.0.0.1:9/mcp", "headers": ["x"]},
        {"kind": "mcp", "name": "m", "url": "http://127.0.0.1:9/mcp",
         "headers": {"X-Key": "a\r\nInjected: 1"}},
    ]
    for raw in bad:
        assert await code_of(act(braid, "ann", "add_connection", **raw)) == "bad_request", raw
    assert await code_of(act(braid, "ann", "add_connection", kind="model", name="m",
                             url="ftp://127.0.0.1/v1")) == "forbidden"  # https or http only
    # A server that is not there: said in words, never with the key in them.
    with pytest.raises(BraidError) as info:
        await act(braid, "ann", "add_connection", kind="model", name="m", url=closed, key=KEY)
    assert info.value.code == "connection_failed" and KEY not in info.value.message
    assert "could not reach" in info.value.message
    assert await code_of(act(braid, "ann", "add_connection", kind="mcp", name="m",
                             url=f"http://127.0.0.1:{free_port()}/mcp")) == "connection_failed"
    assert await code_of(act(braid, "ann", "remove_connection", kind="mcp",
                             name="m")) == "not_found"
    assert (await list_connections(braid, "ann"))["connections"] == []


@pytest.mark.slow
async def test_a_users_http_mcp_server_is_offered_in_their_sessions_only(
        make_braid: MakeBraid, tmp_path: Path) -> None:
    braid = await make_braid(mcp_hosts=("127.0.0.1",), mcp_timeout=20.0)
    with mcp_http_server(tmp_path / "web") as url:
        view = await act(braid, "ann", "add_connection", kind="mcp", name="web", url=url,
                         headers={"Authorization": HEADER})
        assert view["secret_set"] and HEADER not in json.dumps(view)
        mine, _ = await new_session(braid, "ann")
        his, _ = await new_session(braid, "bob")
        tools = await session_meta.list_tools(braid, "ann", mine)
        names = {t["name"] for t in tools["tools"]}
        assert {"mcp__web__whoami", "mcp__web__write"} <= names
        whoami = next(t for t in tools["tools"] if t["name"] == "mcp__web__whoami")
        assert whoami["server"] == "web" and whoami["read_only"] and whoami["tokens"] > 0
        run = await run_turn(braid, mine, "call mcp__web__whoami {}", user_id="ann")
        [result] = [m for m in run["messages"] if m["role"] == "tool"]
        assert not result.get("is_error") and result["content"].endswith("web"), result

        theirs = await session_meta.list_tools(braid, "bob", his)
        assert not any(t["name"].startswith("mcp__web__") for t in theirs["tools"])
        run = await run_turn(braid, his, "call mcp__web__whoami {}", user_id="bob")
        [result] = [m for m in run["messages"] if m["role"] == "tool"]
        assert result["is_error"] and "unknown tool" in result["content"], result
        assert secrets_on_disk(braid.data_dir, HEADER) == []

        await act(braid, "ann", "remove_connection", kind="mcp", name="web")
        tools = await session_meta.list_tools(braid, "ann", mine)
        assert not any(t["name"].startswith("mcp__web__") for t in tools["tools"])
