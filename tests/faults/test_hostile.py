"""The hostile-input matrix over the socket (D9-D13): every action × wrong types, NUL,
lone surrogates, huge and nested values, unknown and foreign ids answers a documented error
code (never `internal`), keeps the socket open, and leaves `git fsck --strict` clean."""

from __future__ import annotations

import json

from conftest import Server, assert_fsck, git

CODES = {"bad_request", "not_found", "forbidden", "conflict", "busy"}
UNKNOWN_ID = "0" * 32
# The parameters of each action (DESIGN §5); each gets every hostile value in turn.
PARAMS: dict[str, tuple[str, ...]] = {
    "send_message": ("text",),
    "cancel_run": ("run_id",),
    "list_turn_files": ("turn_id",),
    "turn_diff": ("turn_id", "path"),
    "revert_turn": ("turn_id", "force"),
    "unrevert_turn": ("turn_id", "force"),
    "continue_run": ("run_id", "continue_from", "input", "fork", "regenerate",
                     "replace_original"),
    "spawn_sub_agent": ("parent_turn_id", "prompt", "label"),
    "merge_branches": ("branches", "message", "strategy"),
    "checkout": ("ref",),
    "list_checkpoints": ("run_id",),
    "update_session": ("title", "archived", "model"),
    "export_session": ("to", "path", "force"),
    "list_files": ("ref", "path"),
    "get_dag": ("ref",),
}
# JSON text of each value, so lone surrogates can be written as escapes.
HOSTILE = {
    "int": "7", "float": "1e308", "list": '["a"]', "dict": '{"a": 1}', "bool": "true",
    "null": "null", "nul": '"main\\u0000"', "surrogate": '"x\\ud800y"',
    "huge": json.dumps("x" * 300_000), "nested": "[" * 40 + "]" * 40,
    "unknown_id": json.dumps(UNKNOWN_ID), "dots": '"../../etc/passwd"',
}
# Values that are well-formed for some parameter and may be accepted there.
MAY_PASS = {"bool", "null", "int", "dict", "list", "huge", "unknown_id", "dots", "float"}


def frame(action: str, request_id: str, param: str, value: str) -> str:
    return (f'{{"action": {json.dumps(action)}, "request_id": {json.dumps(request_id)}, '
            f'{json.dumps(param)}: {value}}}')


def test_every_action_with_every_hostile_value(server: Server) -> None:
    sid = server.new_session()
    run = server.run(sid, "write a.txt one")
    ws = server.socket(sid)
    codes: dict[str, int] = {}
    n = 0
    for action, params in PARAMS.items():
        for param in params:
            for name, value in HOSTILE.items():
                n += 1
                rid = f"h{n}"
                ws.send(raw=frame(action, rid, param, value))
                reply = ws.reply(rid, timeout=30)
                if reply["type"] == "error":
                    code = reply["error"]["code"]
                    assert code in CODES, (action, param, name, reply)
                    codes[code] = codes.get(code, 0) + 1
                    if name in ("nul", "surrogate", "nested"):
                        assert code == "bad_request", (action, param, name, reply)
                else:
                    assert name in MAY_PASS, (action, param, name, reply)
                    codes["result"] = codes.get("result", 0) + 1
            # Let a turn a hostile-but-valid value started end before the next frame.
            ws.call("cancel_run")
    # The socket is still open and the session still works.
    assert ws.call("get_dag")["type"] == "result"
    path = server.session_path(sid)
    assert_fsck(path)
    assert git(path, "status", "--porcelain") == ""
    assert run["status"] == "COMPLETED"
    print(f"\n{n} hostile frames: {codes}")


def test_d9_deep_json_d13_big_frames_and_d11_names(server: Server) -> None:
    sid = server.new_session()
    ws = server.socket(sid)
    ws.send(raw="[" * 100_000 + "]" * 100_000)
    reply = ws.until(lambda f: f.get("type") == "error")
    assert reply["error"]["code"] == "bad_request"
    ws.send(raw='{"action": "send_message", "request_id": "big", "text": "'
            + "x" * 3_000_000 + '"}')
    reply = ws.until(lambda f: f.get("type") == "error")
    assert reply["error"]["code"] == "bad_request", reply
    for ref in ("main\u0000", "main\x00x"):
        assert ws.call("checkout", ref=ref)["error"]["code"] == "bad_request"
    reply = ws.call("merge_branches", branches="main", message="m")
    assert reply["error"]["code"] == "bad_request"  # a name is a name, not a list
    ws.send(raw='{"action": "send_message", "request_id": "s", "text": "a\\udc00b"}')
    assert ws.reply("s")["error"]["code"] == "bad_request"
    assert ws.call("get_dag")["type"] == "result"
