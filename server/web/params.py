"""Parsers of the parameters clients send (DESIGN §5), the one place raw input is checked.

Each parser takes the raw value (`None` when the client left it out) and returns it typed, or
raises `BadRequest` (wrong type or shape: a number where a string goes, a list of the wrong
things, a flag that is not a flag). A string that is a well-formed value but cannot name
anything (an id that is not 32 hex digits) raises `NotFound`: the action layer reports such
a `NotFound` only once every parameter has parsed, so a malformed parameter is always
`bad_request`, whatever else the frame holds. Core functions then take typed arguments."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from server.agent.approvals import DECISIONS, MODES
from server.agent.network import MODES as NETWORK_MODES
from server.agent.turns import MAX_TEXT
from server.base import names
from server.base.errors import BadRequest, NotFound
from server.base.ids import is_message_id
from server.base.names import is_utf8
from server.base.results import SessionChanges
from server.features.connections.own import KINDS
from server.features.files import path_param, ref_param
from server.features.merge import MAX_BRANCHES
from server.features.session_meta import MAX_MODEL, MAX_TITLE
from server.features.sources.sources import SourceRequest
from server.git.merge3 import STRATEGIES
from server.store.search import DEFAULT_LIMIT, MAX_LIMIT

_FALSE = ("", "false", "0", "off", "no")
_TRUE = ("true", "1", "on", "yes")
MAX_ALWAYS = 200
ALWAYS_ITEM = re.compile(r"[A-Za-z0-9_.\-]{1,100}")  # a tool's name

Parser = Callable[[object], Any]


def session_id(value: object) -> str:
    # Missing or not a string is malformed input (bodies and query strings carry it); any
    # string is looked up, and one that names no session of the caller's is not_found.
    if value is None:
        raise BadRequest("session_id is required")
    if not isinstance(value, str):
        raise BadRequest("session_id must be a string")
    return value


def message_id(name: str, noun: str) -> Parser:
    """A run or turn id: not a string is a bad request; a string that cannot be an id names
    nothing, so it is not found."""

    def parse(value: object) -> str:
        if value is None:
            raise BadRequest(f"{name} is required")
        if not isinstance(value, str):
            raise BadRequest(f"{name} must be a string")
        if not is_message_id(value):
            raise NotFound(f"no {noun} {value!r}")
        return value

    return parse


def optional_run_id(value: object) -> str | None:
    """`cancel_run`'s run: none (or "") means the one the user is watching."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("run_id must be a string")
    return value


def text(name: str, *, required: bool = True) -> Parser:
    """A message for the model: a non-empty string without NUL or lone surrogates."""

    def parse(value: object) -> str | None:
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"{name} must be a non-empty string")
        if len(value) > MAX_TEXT:
            raise BadRequest(f"{name} is longer than {MAX_TEXT} characters")
        if "\0" in value or not is_utf8(value):
            raise BadRequest(f"{name} must not hold NUL characters or lone surrogates")
        return value

    return parse


def string(name: str, *, default: str = "", limit: int = MAX_TEXT) -> Parser:
    """Any string (missing: `default`)."""

    def parse(value: object) -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            raise BadRequest(f"{name} must be a string")
        if len(value) > limit:
            raise BadRequest(f"{name} is longer than {limit} characters")
        return value

    return parse


def form_flag(name: str) -> Parser:
    """A flag from JSON (a boolean) or from a form (a string such as "on" or "false")."""

    def parse(value: object) -> bool:
        if value is None or isinstance(value, bool):
            return bool(value)
        if isinstance(value, str) and value.lower() in _FALSE:
            return False
        if isinstance(value, str) and value.lower() in _TRUE:
            return True
        raise BadRequest(f"{name} must be a boolean")

    return parse


def strict_flag(name: str) -> Parser:
    """true, false or null (None): no coercion."""

    def parse(value: object) -> bool | None:
        if value is not None and not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false")
        return value

    return parse


def optional_path(value: object) -> str | None:
    """`turn_diff`'s path: one of the paths the turn changed, or none for all."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("path must be a string")
    return value


def branch_name(value: object) -> str:
    if not isinstance(value, str) or not value or value.startswith("-") or ".." in value \
            or "\0" in value or len(value) > 255:
        raise BadRequest("ref must be a branch name")
    return value


# The file panel's `ref` and `path` are checked where the panel's uploads are too.
ref = ref_param
workdir_path = path_param


def branch_list(value: object) -> list[str]:
    """The branches to merge: a non-empty list of distinct names (a name is not a list)."""
    if isinstance(value, list) and not value:
        raise BadRequest("tick the branches to merge first: none was chosen")
    if not isinstance(value, list):
        raise BadRequest("branches must be a list of branch names")
    if len(value) > MAX_BRANCHES:
        raise BadRequest(f"at most {MAX_BRANCHES} branches can be merged at once")
    if not all(isinstance(b, str) and b and not b.startswith("-") and "\0" not in b
               for b in value):
        raise BadRequest("branches must be branch names")
    if len(set(value)) != len(value):
        raise BadRequest("a branch is named twice")
    return list(value)


def strategy(value: object) -> str:
    if value is None:
        return "fail"
    if value not in STRATEGIES:
        raise BadRequest(f"strategy must be one of {', '.join(STRATEGIES)}")
    return str(value)


MAX_RESOLUTION = 1_000_000  # characters of one file resolved by hand


def resolutions(value: object) -> dict[str, str]:
    """`resolutions`: {workdir path: text}, the user's own result for a conflicted file (the
    merge panel's conflict editor sends the files the user edited)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 1000:
        raise BadRequest("resolutions must be an object of {path: text}")
    out: dict[str, str] = {}
    for path, text in value.items():
        if not isinstance(text, str) or not is_utf8(text):
            raise BadRequest(f"the text resolving {str(path)[:80]} must be a string")
        if len(text) > MAX_RESOLUTION:
            raise BadRequest(f"the text resolving {str(path)[:80]} is too long")
        out[path_param(path, required=True)] = text
    return out


def continue_from(value: object) -> str | int:
    if value is None:
        return "end"
    if isinstance(value, bool) or not (value in ("end", "last_user") or isinstance(value, int)):
        raise BadRequest('continue_from must be "end", "last_user" or an integer')
    assert isinstance(value, str | int)
    return value


def label(value: object) -> str | None:
    """A sub-agent's label; the page's empty label field means none."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("label must be a string")
    return value


def export_target(value: object) -> str:
    if value not in ("branch", "folder"):
        raise BadRequest("to must be 'branch' or 'folder'")
    return str(value)


def folder(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or "\0" in value:
        raise BadRequest("path must be a folder path")
    return value


def one_line(value: object, name: str, limit: int) -> str:
    """A one-line, printable, non-empty string of at most `limit` characters."""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    cleaned = value.strip()
    if not cleaned:
        raise BadRequest(f"{name} must not be empty")
    if len(cleaned) > limit:
        raise BadRequest(f"{name} is longer than {limit} characters")
    # Control characters (NUL, newlines, escapes), bidi overrides, line separators and lone
    # surrogates cannot be shown on one line or stored as UTF-8 (base/names.py's title rule).
    why = names.title_refusal(cleaned)
    if why:
        raise BadRequest(f"{name} {why}")
    return cleaned


def session_changes(raw: object) -> SessionChanges:
    """`update_session`'s fields: only those the client sent, each checked (no coercion).
    `raw`: all the input (a `whole` parameter), which the transports make a dict."""
    if not isinstance(raw, dict):
        raise BadRequest("the changes must be an object")
    changes: SessionChanges = {}
    if "title" in raw:
        changes["title"] = one_line(raw["title"], "title", MAX_TITLE)
    if "archived" in raw:
        if not isinstance(raw["archived"], bool):
            raise BadRequest("archived must be true or false")
        changes["archived"] = raw["archived"]
    if "model" in raw:
        model = raw["model"]
        # null (or "") goes back to the server's default model.
        changes["model"] = None if model is None or model == "" else \
            one_line(model, "model", MAX_MODEL)
    if "approvals" in raw:
        changes["approvals"] = one_of(raw["approvals"], "approvals", MODES)
    if "tools_off" in raw:
        changes["tools_off"] = tool_names(raw["tools_off"])
    if "approvals_always" in raw:  # how an Always is taken back
        changes["approvals_always"] = always_list(raw["approvals_always"])
    if "shell_network" in raw:
        changes["shell_network"] = one_of(raw["shell_network"], "shell_network",
                                          NETWORK_MODES)
    if "shell_network_hosts" in raw:
        hosts = raw["shell_network_hosts"]
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise BadRequest("shell_network_hosts must be a list of host names")
        changes["shell_network_hosts"] = sorted({one_line(h, "host", 253).lower()
                                                 for h in hosts})
    return changes


def tool_names(raw: object) -> list[str]:
    """`tools_off`: a list of tool names (as the model sees them), sorted, each once. The
    page's form sends its always-present empty field with them ("" alone: none off)."""
    if raw == "":
        return []
    if isinstance(raw, list):
        raw = [n for n in raw if n != ""]
    if not isinstance(raw, list) or len(raw) > 500 or not all(
            isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in raw):
        raise BadRequest("tools_off must be a list of tool names")
    return sorted(set(raw))


def always_list(value: object) -> list[str]:
    """The tools that run unasked in a session."""
    if not isinstance(value, list) or len(value) > MAX_ALWAYS:
        raise BadRequest(f"approvals_always must be a list of at most {MAX_ALWAYS} tool names")
    for item in value:
        if not isinstance(item, str) or not ALWAYS_ITEM.fullmatch(item):
            raise BadRequest("approvals_always holds tool names")
    return sorted(set(value))


def one_of(value: object, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)}")
    return value


def decision(value: object) -> str:
    """`approve_tool_call`'s answer."""
    if value is None:
        raise BadRequest("decision is required")
    return one_of(value, "decision", DECISIONS)


def call_id(value: object) -> str:
    """A tool call's id as the model gave it: a non-empty string."""
    if value is None:
        raise BadRequest("call_id is required")
    if not isinstance(value, str) or not value or len(value) > 200 or "\0" in value:
        raise BadRequest("call_id must be a tool call's id")
    return value


def message_number(value: object) -> int | None:
    """The transcript page's `before`: a message number (none: the newest turns)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest("before must be a message number")
    return value


def search_limit(value: object) -> int:
    """`GET /api/search`'s `limit`: a positive number (none: 20; above 100: 100)."""
    if value is None or value == "":
        return DEFAULT_LIMIT
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest("limit must be a positive number")
    return min(value, MAX_LIMIT)


def commit_id(value: object) -> str | None:
    """A full commit id (none: the branch shown)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) != 40 or \
            any(c not in "0123456789abcdef" for c in value):
        raise BadRequest("commit must be a commit id")
    return value


def _where(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be a non-empty string")
    if "\0" in value or value.startswith("-"):
        raise BadRequest(f"{name} is not a valid path, URL or ref")
    return value.strip()


def source(value: object) -> SourceRequest | None:
    """`POST /api/sessions`' `source`: `{path}` (a folder) or `{git, ref?}` (a repository)."""
    if value is None:
        return None
    if not isinstance(value, dict) or ("path" in value) == ("git" in value):
        raise BadRequest("source must be {path} (a folder) or {git, ref?} (a repository)")
    if "path" in value:
        return SourceRequest("folder", _where(value["path"], "source.path"))
    ref = value.get("ref")
    return SourceRequest("git", _where(value["git"], "source.git"),
                         None if ref in (None, "") else _where(ref, "source.ref"))


def new_model(value: object) -> str | None:
    """A new session's model (none: the server's default)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("model must be a non-empty string")
    return value.strip()


def full_commit_id(value: object) -> str:
    """A DAG node's commit: all 40 hex digits."""
    if not isinstance(value, str) or len(value) != 40 or \
            any(c not in "0123456789abcdef" for c in value):
        raise BadRequest("commit_id must be a 40-hex commit id")
    return value


MAX_PATHS = 1000  # files named in one per-file revert


def turn_paths(value: object) -> list[str] | None:
    """`revert_turn`/`unrevert_turn`'s `paths`: some files of the turn (none: all of them).
    Whether the turn changed them is for the core to say (`bad_request` if not)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise BadRequest("paths must be a non-empty list of the turn's file paths")
    if len(value) > MAX_PATHS:
        raise BadRequest(f"at most {MAX_PATHS} paths at once")
    if not all(isinstance(p, str) and p and "\0" not in p and is_utf8(p) for p in value):
        raise BadRequest("paths must be file paths (strings)")
    return list(dict.fromkeys(value))


def message_index(value: object) -> int:
    """`rewind_files`' place in the run: the number of its messages kept, an integer."""
    if value is None:
        raise BadRequest("message_index is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest("message_index must be an integer")
    return value


# -- a user's own connections (features/connections/) ---------------------------------------

MAX_URL = 2000
MAX_SECRET = 4096  # characters of a key or of one header's value
MAX_HEADERS = 20
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}")  # an HTTP token


def connection_kind(value: object) -> str:
    return one_of(value, "kind", KINDS)


def connection_name(value: object) -> str:
    """A connection's name (its kind's own rules are the feature's)."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("name must be a non-empty string")
    return one_line(value.strip(), "name", 40)


def connection_url(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("url must be a non-empty string")
    return one_line(value.strip(), "url", MAX_URL)


def secret(value: object) -> str | None:
    """A key: none, or one line (it goes into a header)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("key must be a string")
    return one_line(value.strip(), "key", MAX_SECRET)


def headers(value: object) -> dict[str, str]:
    """An MCP server's headers: an object of header names to one-line values."""
    if value is None or value == "":
        return {}
    if not isinstance(value, dict) or len(value) > MAX_HEADERS:
        raise BadRequest(f"headers must be an object of at most {MAX_HEADERS} headers")
    out: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise BadRequest("a header's name must be an HTTP token")
        if not isinstance(text, str):
            raise BadRequest(f"header {name!r} must be a string")
        out[name] = one_line(text.strip(), f"header {name!r}", MAX_SECRET)
    return out


def model_ids(value: object) -> list[str]:
    """The models of an endpoint: a list, or names separated by commas or spaces (none: the
    ones it lists)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,]+", value) if v]
    if not isinstance(value, list) or len(value) > 50 or not all(
            isinstance(v, str) and 0 < len(v) <= MAX_MODEL and "@" not in v
            and v.isprintable() and " " not in v for v in value):
        raise BadRequest("models must be at most 50 model ids (no spaces or '@')")
    return list(dict.fromkeys(value))
