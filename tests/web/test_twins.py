"""Every action that has both a socket and an HTTP form answers the same for the same input
(DESIGN §5; issue 8): two sessions are given the same history, then every case runs over the
socket on one and over HTTP on the other, in the same order, and the answers are compared
(the error's code, message and details; the result's data, with ids and times masked, since
the two sessions' ids differ). A new action declared for both transports fails this test
until it has cases here."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from conftest import Server, WsClient, assert_fsck
from server.web.actions import SPECS, by_name

STATUS = {"bad_request": 400, "not_found": 404, "conflict": 409, "busy": 409}
UNKNOWN = "0" * 32
Ctx = dict[str, Any]
Params = Callable[[Ctx], dict[str, Any]]


def keep(ctx: Ctx, name: str) -> Callable[[dict[str, Any]], None]:
    def remember(data: dict[str, Any]) -> None:
        ctx[name] = data

    return remember


# (action, params of the session's context, what to remember of a result). Path and query
# parameters are strings over HTTP, so only body parameters get other JSON types here.
def cases() -> list[tuple[str, Params, str | None]]:
    t: Params = lambda c: {"turn_id": c["turn"]}  # noqa: E731
    return [
        ("send_message", lambda c: {"text": 5}, None),
        ("send_message", lambda c: {"text": "   "}, None),
        ("send_message", lambda c: {}, None),
        ("send_message", lambda c: {"text": "a\u0000b"}, None),
        ("send_message", lambda c: {"text": "write b.txt two"}, "second"),
        ("send_message", lambda c: {"text": "say q", "queue": "maybe"}, None),
        ("send_message", lambda c: {"text": "say free", "queue": True}, None),  # just runs
        ("list_queue", lambda c: {}, None),
        ("list_tools", lambda c: {}, None),
        ("compact", lambda c: {}, None),  # one turn: nothing to summarize, conflict on both
        ("update_queued", lambda c: {"queued_id": UNKNOWN, "text": "x"}, None),
        ("update_queued", lambda c: {"queued_id": UNKNOWN}, None),
        ("update_queued", lambda c: {"queued_id": "nope", "text": "x"}, None),
        ("cancel_queued", lambda c: {"queued_id": UNKNOWN}, None),
        ("cancel_queued", lambda c: {"queued_id": "nope"}, None),
        ("list_turn_files", t, None),
        ("list_turn_files", lambda c: {"turn_id": UNKNOWN}, None),
        ("list_turn_files", lambda c: {"turn_id": "nope"}, None),
        ("turn_diff", t, None),
        ("turn_diff", lambda c: {"turn_id": c["turn"], "path": "a.txt"}, None),
        ("turn_diff", lambda c: {"turn_id": c["turn"], "path": "zzz.txt"}, None),
        ("turn_diff", lambda c: {"turn_id": "not-an-id", "path": "a.txt"}, None),
        ("revert_turn", lambda c: {"turn_id": c["turn"], "force": "maybe"}, None),
        ("revert_turn", lambda c: {"turn_id": c["turn"], "force": 3}, None),
        ("revert_turn", lambda c: {"turn_id": UNKNOWN, "force": [1]}, None),  # bad first
        ("revert_turn", lambda c: {"turn_id": UNKNOWN}, None),
        ("revert_turn", t, None),
        ("revert_turn", t, None),  # reverting a reverted turn: conflict
        ("unrevert_turn", lambda c: {"turn_id": "nope"}, None),
        ("unrevert_turn", lambda c: {"turn_id": c["turn"], "force": "on"}, None),
        # Per file (`paths`), and the files-only rewind with its undo.
        ("revert_turn", lambda c: {"turn_id": c["turn"], "paths": ["zzz.txt"]}, None),
        ("revert_turn", lambda c: {"turn_id": c["turn"], "paths": "a.txt"}, None),
        ("unrevert_turn", lambda c: {"turn_id": c["turn"], "paths": ["a.txt"]}, None),
        ("revert_turn", lambda c: {"turn_id": c["turn"], "paths": ["a.txt"]}, None),
        ("unrevert_turn", lambda c: {"turn_id": c["turn"], "paths": ["a.txt"]}, None),
        ("rewind_files", lambda c: {"run_id": c["turn"], "message_index": 99}, None),
        ("rewind_files", lambda c: {"run_id": c["turn"], "message_index": "1"}, None),
        ("rewind_files", lambda c: {"run_id": UNKNOWN, "message_index": 0}, None),
        ("rewind_files", lambda c: {"run_id": c["turn"], "message_index": 0}, "rewind"),
        ("unrevert_turn", lambda c: {"turn_id": c["rewind"]["turn_id"]}, None),
        ("unrevert_turn", lambda c: {"turn_id": c["rewind"]["turn_id"]}, None),
        ("list_checkpoints", lambda c: {"run_id": c["turn"]}, None),
        ("list_checkpoints", lambda c: {"run_id": UNKNOWN}, None),
        ("list_checkpoints", lambda c: {"run_id": "x"}, None),
        ("get_dag", lambda c: {}, None),
        ("spawn_sub_agent", lambda c: {"parent_turn_id": c["turn"]}, None),
        ("spawn_sub_agent", lambda c: {"parent_turn_id": c["turn"], "prompt": 3}, None),
        ("spawn_sub_agent", lambda c: {"parent_turn_id": "f" * 32, "prompt": "x"}, None),
        ("spawn_sub_agent", lambda c: {"parent_turn_id": 5, "prompt": "x"}, None),
        ("spawn_sub_agent", lambda c: {"parent_turn_id": c["turn"], "prompt": "x",
                                       "label": 7}, None),
        # The page's empty label field: no label, on both (they once drifted apart).
        ("spawn_sub_agent", lambda c: {"parent_turn_id": c["turn"], "label": "",
                                       "prompt": "write k.txt kid\nsay kid"}, "sub"),
        ("merge_branches", lambda c: {"branches": c["sub"]["branch"], "message": "m"}, None),
        ("merge_branches", lambda c: {"branches": []}, None),
        ("merge_branches", lambda c: {"branches": ["nope"]}, None),
        ("merge_branches", lambda c: {"branches": [c["sub"]["branch"]], "strategy": "x"},
         None),
        ("merge_branches", lambda c: {"branches": [c["sub"]["branch"]], "message": "m"},
         None),
        ("remove_sub_branch", lambda c: {"branch": "main"}, None),
        ("remove_sub_branch", lambda c: {"branch": "-x"}, None),
        ("remove_sub_branch", lambda c: {"branch": "sub_nothing_here_0"}, None),
        ("remove_sub_branch", lambda c: {"branch": c["sub"]["branch"]}, None),
        ("remove_sub_branch", lambda c: {"branch": c["sub"]["branch"]}, None),  # gone
        ("continue_run", lambda c: {"run_id": c["turn"], "fork": "yes"}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "keep_files": "yes"}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "continue_from": "2"}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "input": ["x"]}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "continue_from": 99,
                                    "input": "x"}, None),
        ("continue_run", lambda c: {"run_id": "f" * 32, "input": "x"}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "regenerate": True,
                                    "input": "x"}, None),
        ("update_session", lambda c: {"title": 5}, None),
        ("update_session", lambda c: {"archived": "yes"}, None),
        ("update_session", lambda c: {"title": "\u0007bell"}, None),
        ("update_session", lambda c: {"title": "Twins"}, None),
        ("update_session", lambda c: {"approvals": "sometimes"}, None),
        ("approve_tool_call", lambda c: {"run_id": c["turn"], "call_id": "c1",
                                         "decision": "maybe"}, None),
        ("approve_tool_call", lambda c: {"run_id": c["turn"], "decision": "approve"}, None),
        ("approve_tool_call", lambda c: {"run_id": c["turn"], "call_id": "c1",
                                         "decision": "deny", "reason": 3}, None),
        ("approve_tool_call", lambda c: {"run_id": c["turn"], "call_id": "c1",
                                         "decision": "approve"}, None),
        ("approve_tool_call", lambda c: {"run_id": "nope", "call_id": "c1",
                                         "decision": "approve"}, None),
        ("export_session", lambda c: {"to": "x"}, None),
        ("export_session", lambda c: {"to": "folder", "path": 5}, None),
        ("export_session", lambda c: {"to": "folder"}, None),
        ("export_session", lambda c: {"to": "branch", "force": "maybe"}, None),
        ("update_from_source", lambda c: {}, None),
        ("fork_session", lambda c: {}, None),
        ("continue_run", lambda c: {"run_id": c["turn"], "input": "again", "fork": True},
         "continued"),
        ("continue_run", lambda c: {"run_id": c["turn"], "continue_from": 0,
                                    "input": "write k.txt kept", "keep_files": True}, None),
    ]


def mask(value: Any) -> Any:
    """Ids and times masked: the two sessions are alike, not the same."""
    if isinstance(value, dict):
        return {k: "<time>" if k.endswith("_at") else mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    if isinstance(value, str):
        value = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", value)
        return re.sub(r"[0-9a-f]{7,40}", "<id>", value)
    return value


def over_http(srv: Server, sid: str, name: str, params: dict[str, Any]) -> tuple[int, Any]:
    action = by_name(name)
    http = action.http
    assert http is not None
    renamed = {p.name: p.http_name for p in action.params if p.http_name}  # text: input
    args = {"session_id": sid, **{renamed.get(k, k): v for k, v in params.items()}}
    names = set(re.findall(r"{(\w+)}", http.path))
    path = http.path.format(**{n: urllib.parse.quote(str(args[n]), safe="") for n in names})
    rest = {k: v for k, v in args.items() if k not in names}
    if http.method == "GET":
        status, answer = srv.api("GET", f"{path}?{urllib.parse.urlencode(rest)}")
    else:
        status, answer = srv.api(http.method, path, rest)
    if status >= 400:  # a message names a parameter as the client sent it
        for socket_name, http_name in renamed.items():
            message = answer["error"]["message"]
            answer["error"]["message"] = message.replace(http_name, socket_name)
    return status, answer


def over_socket(ws: WsClient, name: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = ws.call(name, **params)
    if reply["type"] == "result" and name in ("send_message", "continue_run"):
        # HTTP waits for the run to end; so does this side before its next case.
        run_id = reply["data"]["run_id"]
        ws.until(lambda f: f.get("type") == "event" and f["data"].get("run_id") == run_id
                 and f["event"] in ("run_completed", "run_error", "run_cancelled"), 60)
    return reply


def compare(name: str, reply: dict[str, Any], status: int, answer: Any) -> None:
    case = (name, reply, status, answer)
    if reply["type"] == "error":
        code = reply["error"]["code"]
        assert status == STATUS[code], case
        assert mask(answer["error"]) == mask(reply["error"]), case
        return
    assert status == by_name(name).http.status, case  # type: ignore[union-attr]
    data = reply["data"]
    if by_name(name).http.call is not None:  # type: ignore[union-attr]
        # HTTP answers with the run once it ended; the socket at once, with its start.
        data = {k: v for k, v in data.items() if k != "status"}
        answer = {k: answer[k] for k in data}
    assert mask(answer) == mask(data), case


@pytest.mark.slow
def test_socket_and_http_twins_answer_the_same(server: Server) -> None:
    twins = {a.name for a in SPECS if a.socket and a.http is not None}
    table = cases()
    assert {name for name, _, _ in table} == twins, "every twin action needs cases here"
    sides: list[Ctx] = []
    for _ in range(2):
        sid = server.new_session()
        sides.append({"sid": sid, "turn": server.run(sid, "write a.txt one")["run_id"]})
    sock, web = sides
    ws = server.socket(sock["sid"])
    try:
        for name, params, remember in table:
            reply = over_socket(ws, name, params(sock))
            status, answer = over_http(server, web["sid"], name, params(web))
            compare(name, reply, status, answer)
            if remember:
                sock[remember], web[remember] = reply["data"], answer
        assert ws.call("get_dag")["type"] == "result"  # the socket stayed open
    finally:
        ws.close()
    for side in sides:
        assert_fsck(server.session_path(side["sid"]))


def test_every_rendered_action_is_declared() -> None:
    # The HTML frames of results and errors are keyed by action name: each names a declared
    # socket action, so a renamed or removed action cannot leave a renderer behind.
    from server.web.actions import ACTIONS
    from server.web.render.frames import ERRORS, RESULTS

    assert set(RESULTS) | set(ERRORS) <= set(ACTIONS)
