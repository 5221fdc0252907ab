"""Model endpoints: the embedded demo model, the default OpenAI-compatible endpoint
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `BRAID_MODEL`), and any named in `BRAID_ENDPOINTS`,
a JSON or TOML file, so a local server and a hosted one can be used side by side:

    [[endpoints]]                       # TOML; JSON: {"endpoints": [{...}, ...]} or [{...}]
    name = "local"                      # how the page and session.json name it
    base_url = "http://127.0.0.1:8080/v1"
    api_key_env = "LOCAL_KEY"           # the key is read from this variable, never the file
    models = ["smollm2"]                # optional: listed without asking GET /v1/models
    tool_choice = "write_file"          # optional: auto | none | required | a tool's name
    sub_tool_choice = "write_file"      # optional: the same, for a sub-agent's turn
    tools = ["write_file"]              # optional: only these tools are offered
    named_tool_choice = false           # send a tool name as the OpenAI object form
    send_reasoning = false              # replay reasoning_content to this server
    max_argument_chars = 200            # optional: every string argument of a tool at most
                                        #   this long (a JSON schema maxLength)
    max_argument_items = 4              # optional: every list argument at most this long
    params = { max_tokens = 512 }       # optional: extra fields for every request

A forced tool (`required` or a tool's name) holds for a turn's first model call; the calls
after it send `tool_choice: "none"`, so the model answers from the tool's result (forced
again, it could never answer; left on `auto`, a model that needed forcing rarely chooses well).

`max_argument_chars` bounds each string argument of every tool offered to that endpoint (a
`maxLength` in its JSON schema), `max_argument_items` each list (`maxItems`). A server that
constrains tool calls by their schema (llama-server, vLLM) then ends every call within the
bound: a small model forced to call a tool no longer writes one string (or one list) until
`max_tokens` cuts the call's JSON off.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from server.base.records import ConnectionRecord

DEMO = "demo"
DEFAULT = "default"
TOOL_CHOICE_WORDS = ("auto", "none", "required")
HIDDEN = "***"
# Query parameters of a base URL shown as they are; every other value (api-key, key, token,
# access_token, sig, …) may be a credential and is shown as *** (DESIGN §4 "Login and secrets").
PLAIN_PARAMS = frozenset({"api-version", "api_version", "version"})
# User-info runs to the authority's last `@` (how curl, httpx and urllib read `u:p@ss@host`).
_USERINFO = re.compile(r"(?<=://)[^/?#\s]+@")
_PARAM = re.compile(r"(?<=[?&])([\w.~%-]+)=([^&#\s'\"]*)")
_FRAGMENT = re.compile(r"(://[^\s'\"#]*)#[^\s'\"]+")  # a URL's own #..., never sent


def redact_url(url: str) -> str:
    """`url` with its user-info, query values (but PLAIN_PARAMS's) and fragment as ***."""
    url = _FRAGMENT.sub(r"\1#" + HIDDEN, _USERINFO.sub(HIDDEN + "@", url))
    return _PARAM.sub(lambda m: m[0] if m[1].lower() in PLAIN_PARAMS
                      else f"{m[1]}={HIDDEN}", url)


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str | None  # None: the embedded demo model
    api_key_env: str | None = None
    api_key: str | None = None
    models: tuple[str, ...] = ()
    tool_choice: str | None = None
    # A sub-agent's turn's (else `tool_choice`): forcing `spawn_sub_agents` on the user's
    # run must not force every child to spawn again.
    sub_tool_choice: str | None = None
    tools: tuple[str, ...] | None = None
    named_tool_choice: bool = False
    send_reasoning: bool = False
    max_argument_chars: int | None = None
    max_argument_items: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    # A user's own endpoint (added on the page): its URL is held to the import's rules
    # (reach.py, BRAID_ENDPOINT_HOSTS) each time a turn uses it.
    own: bool = False

    @property
    def is_demo(self) -> bool:
        return self.base_url is None

    def key(self, env: dict[str, str] | None = None) -> str | None:
        if self.api_key_env:
            return (os.environ if env is None else env).get(self.api_key_env) or None
        return self.api_key

    def where(self) -> str:
        """The server as errors, logs and pages name it: credentials shown as ***."""
        return redact_url(self.base_url) if self.base_url else "the embedded demo model"

    def request_url(self) -> tuple[str | None, dict[str, str]]:
        """The client's base URL without its query, and the query as parameters every
        request carries: the client appends paths to the base URL, so a query left in it
        would end up before `/chat/completions`."""
        if not self.base_url:
            return None, {}
        parts = urlsplit(self.base_url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        return base, query

    def secrets(self) -> list[str]:
        """The credentials in the base URL, as they may appear in an error's text."""
        if not self.base_url:
            return []
        parts = urlsplit(self.base_url)
        found = [parts.password or ""]  # the user name is hidden in URLs, not in free text
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True)
                  if k.lower() not in PLAIN_PARAMS]
        found.append(parts.fragment)  # never sent, but some paste a key there
        found.append(self.api_key or "")  # a server may quote the key it refused
        found += [unquote(v) for v in found]
        # Longest first, so a secret holding another is hidden whole; a one- or two-letter
        # secret is not hunted in free text (it would hide every such letter), only in URLs.
        return sorted({v for v in found if len(v) >= 3}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """`text` (an error, a log line) with every credential of this endpoint as ***."""
        text = redact_url(text)
        for secret in self.secrets():
            text = text.replace(secret, HIDDEN)
        return text


def _text(entry: dict[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string")
    return value.strip()


def _names(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: {key} must be a list of names")
    return tuple(value)


def _bool(entry: dict[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {key} must be true or false")
    return value


def _count(entry: dict[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {key} must be a whole number of at least 1")
    return value


def bound_arguments(schema: dict[str, object], chars: int | None,
                    items: int | None) -> dict[str, object]:
    """`schema` (a tool's JSON schema) with every string's maxLength at most `chars` and every
    array's maxItems at most `items` (None: as it was)."""
    return _bound(schema, chars, items)  # type: ignore[no-any-return]


def _tighter(given: object, limit: int | None) -> object:
    if limit is None:
        return given
    return min(given, limit) if isinstance(given, int) else limit


def _bound(schema: Any, chars: int | None, items: int | None) -> Any:
    if isinstance(schema, list):
        return [_bound(item, chars, items) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _bound(value, chars, items) if key in ("items", "anyOf", "oneOf", "allOf")
           else value for key, value in schema.items()}
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {name: _bound(value, chars, items)
                             for name, value in schema["properties"].items()}
    if schema.get("type") == "string" and chars is not None:
        out["maxLength"] = _tighter(schema.get("maxLength"), chars)
    if schema.get("type") == "array" and items is not None:
        out["maxItems"] = _tighter(schema.get("maxItems"), items)
    return out


def parse_endpoint(entry: object, where: str) -> Endpoint:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: each endpoint must be a table/object")
    name = _text(entry, "name", where)
    base_url = _text(entry, "base_url", where)
    if not name or not base_url:
        raise ValueError(f"{where}: an endpoint needs a name and a base_url")
    if name == DEMO:
        raise ValueError(f"{where}: the name {DEMO!r} is the embedded demo model's")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: base_url must start with http:// or https://")
    return Endpoint(
        name=name, base_url=base_url.rstrip("/"),
        api_key_env=_text(entry, "api_key_env", where),
        models=_names(entry, "models", where) or (),
        tool_choice=_text(entry, "tool_choice", where), tools=_names(entry, "tools", where),
        sub_tool_choice=_text(entry, "sub_tool_choice", where),
        named_tool_choice=_bool(entry, "named_tool_choice", where),
        send_reasoning=_bool(entry, "send_reasoning", where),
        max_argument_chars=_count(entry, "max_argument_chars", where),
        max_argument_items=_count(entry, "max_argument_items", where),
        params=_params(entry, where),
    )


RESERVED = frozenset({"model", "messages", "stream", "stream_options", "tools", "tool_choice"})


def _params(entry: dict[str, Any], where: str) -> dict[str, Any]:
    value = entry.get("params", {})
    if not isinstance(value, dict):
        raise ValueError(f"{where}: params must be a table/object of request fields")
    taken = RESERVED & set(value)
    if taken:
        raise ValueError(f"{where}: params cannot set {', '.join(sorted(taken))}")
    return dict(value)


def load_endpoints_file(path: Path) -> list[Endpoint]:
    """Read BRAID_ENDPOINTS; a bad file stops start-up with a message naming it."""
    where = str(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"BRAID_ENDPOINTS: cannot read {where}: {e.strerror or e}") from e
    data: Any = None
    try:
        data = json.loads(raw)
    except ValueError as json_error:
        try:
            data = tomllib.loads(raw)
        except tomllib.TOMLDecodeError as e:
            as_json = path.suffix.lower() == ".json"
            raise ValueError(f"BRAID_ENDPOINTS: {where} is neither valid JSON nor TOML: "
                             f"{json_error if as_json else e}") from e
    entries = data.get("endpoints") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError(f"BRAID_ENDPOINTS: {where} must hold a list named endpoints")
    out = [parse_endpoint(e, f"{where} endpoint {i + 1}") for i, e in enumerate(entries)]
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ValueError(f"BRAID_ENDPOINTS: {where} names an endpoint twice")
    return out


def endpoints_from_settings(settings: Any) -> list[Endpoint]:
    """All endpoints, the demo model first: it always works."""
    out = [Endpoint(name=DEMO, base_url=None, models=(DEMO,))]
    if settings.openai_base_url or settings.model != DEMO:
        out.append(Endpoint(
            name=DEFAULT, base_url=(settings.openai_base_url or "https://api.openai.com/v1"),
            api_key=settings.openai_api_key,
            models=(settings.model,) if settings.model != DEMO else (),
            tool_choice=getattr(settings, "tool_choice", None),
        ))
    if getattr(settings, "endpoints_file", None):
        extra = load_endpoints_file(Path(settings.endpoints_file))
        taken = {e.name for e in out}
        for e in extra:
            if e.name in taken:
                raise ValueError(f"BRAID_ENDPOINTS: the name {e.name!r} is taken")
        out.extend(extra)
    return out


def user_endpoints(records: list[ConnectionRecord]) -> dict[str, Endpoint]:
    """A user's own endpoints (added on the page; store/users.py keeps them) by name."""
    return {r["name"]: Endpoint(name=r["name"], base_url=r["url"],
                                api_key=r["secret"].get("api_key") or None,
                                models=tuple(r["models"]), own=True)
            for r in records if r["kind"] == "model"}


def choice_for_call(tool_choice: str | None, call: int) -> str | None:
    """The tool_choice of a turn's `call`-th model call (0 = the first)."""
    if tool_choice in (None, "auto", "none"):
        return tool_choice
    return tool_choice if call == 0 else "none"
