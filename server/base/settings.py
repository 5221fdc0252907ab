"""Settings (DESIGN §7), each declared once: a field of `Settings` made by `setting(variable,
kind, default, help)`. `Settings.from_env` reads them all once at start (the CLI then overrides
a few); `braid settings` prints this table; tests/base/test_settings.py checks the README's and
docs/DESIGN.md's lists against it, and that no other module reads a `BRAID_*` variable.

Adding a setting is one line in `Settings` below. Every value is read by its kind: unset or
blank is the default; a yes/no is one of `on 1 true yes` / `off 0 false no` (any case);
anything else that does not parse stops start-up with a sentence naming the variable.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

CHECKPOINT_MODES = ("tool-batch", "turn", "tools")
YES = ("on", "1", "true", "yes")
NO = ("off", "0", "false", "no")
GIB = 1024 ** 3


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How a variable's text becomes a value: `parse` raises ValueError with what was wanted
    (a phrase completing "BRAID_X must be ...")."""
    name: str  # shown by `braid settings`
    parse: Callable[[str], T]


@dataclass(frozen=True)
class Setting:
    variable: str
    attribute: str
    kind: str
    default: str  # as `braid settings` shows it
    help: str
    later: bool  # declared for a coming feature (DESIGN §7): nothing reads it yet
    secret: bool  # `braid settings` never prints its value


def _yes_no(raw: str) -> bool:
    word = raw.strip().lower()
    if word in YES:
        return True
    if word in NO:
        return False
    raise ValueError("on or off (or 1/0, true/false, yes/no)")


def _whole(least: int = 0) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        raw = raw.strip()
        if not raw.isdigit() or int(raw) < least:
            raise ValueError(f"a whole number of at least {least}" if least else
                             "a whole number")
        return int(raw)
    return parse


def _number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("a number") from None
    if value < 0 or value != value:
        raise ValueError("a number, not negative")
    return value


def _choice(*options: str) -> Kind[str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError(f"one of {', '.join(options)}")
        return raw
    return Kind(" | ".join(options), parse)


def _words(raw: str) -> tuple[str, ...]:
    return tuple(w.strip().lower() for w in raw.split(",") if w.strip())


def _postgres(raw: str) -> str:
    if not raw.startswith(("postgresql://", "postgres://")):
        raise ValueError("a postgresql:// URL")
    return raw


TEXT: Kind[str] = Kind("text", lambda raw: raw)
MAYBE_TEXT: Kind[str | None] = Kind("text", lambda raw: raw)
PATH: Kind[Path] = Kind("path", lambda raw: Path(raw).expanduser())
MAYBE_PATH: Kind[Path | None] = Kind("path", lambda raw: Path(raw).expanduser())
PATHS: Kind[list[Path]] = Kind(f"paths ({os.pathsep}-separated)", lambda raw: [
    Path(p).expanduser() for p in raw.split(os.pathsep) if p])
YES_NO: Kind[bool] = Kind("yes/no", _yes_no)
WHOLE: Kind[int] = Kind("whole number", _whole())
BYTES: Kind[int] = Kind("bytes", _whole())
SECONDS: Kind[float] = Kind("seconds", _number)
WORDS: Kind[tuple[str, ...]] = Kind("comma-separated", _words)
POSTGRES: Kind[str | None] = Kind("postgresql:// URL", _postgres)


def _shell_mode(raw: str) -> str:
    word = raw.strip().lower()
    if word in ("sandbox", *YES):
        return "sandbox"
    if word in NO:
        return "off"
    if word == "host":
        return "host"
    raise ValueError("sandbox (on), host or off")


SHELL_MODE: Kind[str] = Kind("sandbox | host | off", _shell_mode)


def _at_least(least: int) -> Kind[int]:
    return Kind(f"whole number ≥ {least}", _whole(least))


def _shown(value: object) -> str:
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, int) and value >= GIB and value % GIB == 0:
        return f"{value // GIB} GiB"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def setting(variable: str, kind: Kind[T], default: T, help: str, *,
            shown: str | None = None, factory: Callable[[], T] | None = None,
            later: bool = False, secret: bool = False) -> T:
    """One row of the table: the field's default (or `factory` for one made at start) and
    how `variable` sets it; `later`: declared in DESIGN §7, not read by any code yet (the
    README lists a setting once this is gone)."""
    meta = {"variable": variable, "kind": kind, "help": help, "later": later, "secret": secret,
            "shown": shown if shown is not None else _shown(default)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    data_dir: Path = setting("BRAID_DATA_DIR", PATH, Path("~/.braid"), "where sessions, the "
                             "index and the token live", factory=lambda: Path.home() / ".braid",
                             shown="~/.braid")
    host: str = setting("BRAID_HOST", TEXT, "127.0.0.1", "the address to listen on")
    port: int = setting("BRAID_PORT", WHOLE, 8000, "the port to listen on")
    token: str | None = setting("BRAID_TOKEN", MAYBE_TEXT, None, "the default user's token "
                                "(unset: made once, kept in the data dir)", shown="made once",
                                secret=True)
    model: str = setting("BRAID_MODEL", TEXT, "demo", "the default model id (demo: the "
                         "embedded demo model)")
    openai_base_url: str | None = setting("OPENAI_BASE_URL", MAYBE_TEXT, None,
                                          "the default endpoint, ending in /v1")
    openai_api_key: str | None = setting("OPENAI_API_KEY", MAYBE_TEXT, None,
                                         "the default endpoint's key", secret=True)
    endpoints_file: Path | None = setting("BRAID_ENDPOINTS", MAYBE_PATH, None,
                                          "a JSON or TOML file naming several endpoints")
    # A user's own endpoints (added on the page) are held to the import's URL rules: https,
    # and a host of the server's own network only when listed here (names or CIDRs).
    endpoint_hosts: tuple[str, ...] = setting("BRAID_ENDPOINT_HOSTS", WORDS, (),
                                              "private hosts or CIDRs a user's own model "
                                              "endpoint may be at")
    tool_choice: str | None = setting("BRAID_TOOL_CHOICE", MAYBE_TEXT, None,
                                      "a tool the default endpoint is made to call first")
    model_timeout: float = setting("BRAID_MODEL_TIMEOUT", SECONDS, 120.0,
                                   "seconds to wait for each streamed chunk")
    model_retries: int = setting("BRAID_MODEL_RETRIES", WHOLE, 2,
                                 "retries of a request that failed before it streamed")
    context_tokens: int = setting("BRAID_CONTEXT_TOKENS", _at_least(100), 32_000,
                                  "the newest messages that fit this many tokens are sent")
    checkpoint: str = setting("BRAID_CHECKPOINT", _choice(*CHECKPOINT_MODES), "tool-batch",
                              "when a turn commits its files")
    # The shell (DESIGN §4 "The shell"): `sandbox` (the default; `on` is the same), `host`
    # (no sandbox: the operator's explicit choice) or `off`.
    shell_mode: str = setting("BRAID_SHELL", SHELL_MODE, "sandbox",
                              "the agent's shell: sandbox (on), host (unsandboxed) or off")
    shell_timeout: float = setting("BRAID_SHELL_TIMEOUT", SECONDS, 600.0,
                                   "seconds a shell command may run")
    shell_hosts: tuple[str, ...] = setting("BRAID_SHELL_HOSTS", WORDS, (),
                                           "private hosts or CIDRs a sandboxed command may "
                                           "reach through the proxy")
    shell_max_procs: int = setting("BRAID_SHELL_MAX_PROCS", _at_least(1), 256,
                                   "processes of a command at once")
    shell_max_memory: int = setting("BRAID_SHELL_MAX_MEMORY", BYTES, 2 * GIB,
                                    "memory of a command")
    shell_max_write: int = setting("BRAID_SHELL_MAX_WRITE", BYTES, 2 * GIB,
                                   "bytes a command may write")
    # MCP servers (DESIGN §4 "MCP tools", agent/mcp_servers/).
    mcp_file: Path | None = setting("BRAID_MCP", MAYBE_PATH, None,
                                    "a JSON file of MCP servers (the mcpServers form)")
    mcp_hosts: tuple[str, ...] = setting("BRAID_MCP_HOSTS", WORDS, (),
                                         "private hosts or CIDRs an MCP server may be at")
    mcp_timeout: float = setting("BRAID_MCP_TIMEOUT", SECONDS, 60.0,
                                 "seconds an MCP call may take")
    # The operator's instructions, sent to every model call after the base prompt (DESIGN §4
    # "Project instructions"); read again when the file changes.
    instructions_file: Path | None = setting("BRAID_INSTRUCTIONS", MAYBE_PATH, None,
                                             "a file of server-wide instructions to the model")
    # Compaction (DESIGN §4): off keeps masking and the oldest left out with a note (the
    # bench's drop-oldest side, and an operator who wants no summary calls).
    compaction: bool = setting("BRAID_COMPACTION", YES_NO, True,
                               "summarize a branch's oldest turns when they no longer fit")
    # Folders a session may be imported from (DESIGN §7): the server user's home by default.
    import_roots: list[Path] = setting("BRAID_IMPORT_ROOTS", PATHS, [], "folders the default "
                                       "user may import from and export to",
                                       factory=lambda: [Path.home()], shown="~")
    import_max_file: int = setting("BRAID_IMPORT_MAX_FILE", BYTES, 5 * 1024 * 1024,
                                   "an imported file larger than this is skipped",
                                   shown="5 MiB")
    # Boundaries (DESIGN §4): an import, an update from source or an upload stops past these
    # totals, counted as they arrive; git URLs take only these schemes, and a host that
    # resolves to a loopback/private/link-local address only when listed here (names or CIDRs).
    import_max_bytes: int = setting("BRAID_IMPORT_MAX_BYTES", BYTES, GIB,
                                    "an import, an update or an upload stops past this")
    import_max_files: int = setting("BRAID_IMPORT_MAX_FILES", WHOLE, 200_000,
                                    "... or past this many files")
    import_schemes: tuple[str, ...] = setting("BRAID_IMPORT_SCHEMES", WORDS, ("https",),
                                              "git URL schemes imports may use")
    import_hosts: tuple[str, ...] = setting("BRAID_IMPORT_HOSTS", WORDS, (),
                                            "private hosts or CIDRs git imports may reach")
    # At most this many actions of one socket run at once; past that the server stops reading it.
    socket_inflight: int = setting("BRAID_SOCKET_INFLIGHT", _at_least(1), 32,
                                   "actions of one socket at once")
    # An open session's thread and repository are given back after this many idle seconds,
    # and at most this many stay open at once (least recently used released first).
    idle_seconds: float = setting("BRAID_IDLE_SECONDS", SECONDS, 60.0,
                                  "an idle session gives back its thread after this")
    open_sessions: int = setting("BRAID_OPEN_SESSIONS", WHOLE, 64, "sessions open at most")
    # At most this many turns drive (model loop, tools, checkpoints) at once, the others
    # wait in order (live_runs.TurnGate); 0: no bound.
    active_turns: int = setting("BRAID_ACTIVE_TURNS", WHOLE, 16,
                                "turns driving at once, the others wait (0: no bound)")
    # Fair shares (DESIGN §4): one user's turns driving at once, queued messages (and 10 MB
    # of them: features/queue.py), sub-agent runs at once (and 32 per message:
    # agent/orchestrate.py); past them `too_many` (0: no bound).
    user_turns: int = setting("BRAID_USER_TURNS", WHOLE, 4, "one user's turns at once")
    user_queue: int = setting("BRAID_USER_QUEUE", WHOLE, 100, "one user's queued messages")
    user_subagents: int = setting("BRAID_USER_SUBAGENTS", WHOLE, 16,
                                  "one user's sub-agent runs at once")
    # Unset: the embedded SQLite files in the data dir. A postgresql:// URL: the index and
    # users in PostgreSQL, and several processes coordinated through it (a team server).
    database_url: str | None = setting("BRAID_DATABASE_URL", POSTGRES, None,
                                       "a postgresql:// URL for a team server (unset: SQLite)",
                                       secret=True)
    # The model's `spawn_sub_agents` and `merge_branches` tools (agent/orchestrate.py): on or
    # off, children run at once, levels of children below the user's run.
    subagent_tools: bool = setting("BRAID_SUBAGENT_TOOLS", YES_NO, True,
                                   "the model's spawn_sub_agents and merge_branches tools")
    subagents_parallel: int = setting("BRAID_SUBAGENTS_PARALLEL", _at_least(1), 4,
                                      "a spawn's children at once")
    subagent_depth: int = setting("BRAID_SUBAGENT_DEPTH", WHOLE, 2,
                                  "levels of children below the user's run")
    no_browser: bool = setting("BRAID_NO_BROWSER", YES_NO, False,
                               "`braid open` does not open a browser")
    # Tests only (tests/faults/): crash.py arms itself from these at import.
    crash_at: str | None = setting("BRAID_CRASH_AT", MAYBE_TEXT, None,
                                   "tests: the crash point the process stops at")
    crash_mode: str = setting("BRAID_CRASH_MODE", _choice("kill", "raise"), "kill",
                              "tests: how it stops there")
    # Not settings but what start-up learns: whether the model is offered the shell (off, or
    # `sandbox` where no sandbox can be made), and why not (app/braid.py).
    shell: bool = field(default=True, compare=False)
    shell_unavailable: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.shell = self.shell_mode != "off"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 only: tuple[str, ...] | None = None) -> Settings:
        """Every setting from `env` (the process's environment by default); `only` reads just
        those attributes (a module armed at import, crash.py, before the whole table is)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f, row in _fields():
            if only is not None and f.name not in only:
                continue
            raw = env.get(row.variable, "")
            if not raw.strip():
                continue
            kind = cast(Kind[Any], f.metadata["kind"])
            try:
                values[f.name] = kind.parse(raw)
            except ValueError as e:
                raise ValueError(f"{row.variable} must be {e}, not {raw!r}") from None
        return cls(**values)


def _fields() -> Iterator[tuple[dataclasses.Field[Any], Setting]]:
    for f in dataclasses.fields(Settings):
        meta = f.metadata
        if "variable" not in meta:
            continue
        yield f, Setting(meta["variable"], f.name, cast(Kind[Any], meta["kind"]).name,
                         meta["shown"], meta["help"], meta["later"],
                         meta["secret"])


def table() -> list[Setting]:
    """The declared settings in order: what `braid settings` prints."""
    return [row for _f, row in _fields()]


def variable_of(attribute: str) -> str:
    """The variable that sets `Settings.<attribute>`, for a message naming it."""
    return next(r.variable for r in table() if r.attribute == attribute)
