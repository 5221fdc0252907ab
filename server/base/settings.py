"""Settings from the environment (DESIGN §7); the CLI overrides some of them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

CHECKPOINT_MODES = ("tool-batch", "turn", "tools")


@dataclass
class Settings:
    data_dir: Path = field(default_factory=lambda: Path.home() / ".braid")
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    model: str = "demo"
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    checkpoint: str = "tool-batch"
    shell: bool = False
    shell_timeout: float = 30.0
    model_timeout: float = 120.0  # seconds between streamed chunks
    model_retries: int = 2  # retries of a request that failed before streaming
    endpoints_file: Path | None = None
    tool_choice: str | None = None  # the default endpoint's (see endpoints.py)
    context_tokens: int = 32_000
    # The operator's instructions, sent to every model call after the base prompt (DESIGN §4
    # "Project instructions"); read again when the file changes.
    instructions_file: Path | None = None
    # Compaction (DESIGN §4): off keeps only masking and the oldest left out with a note
    # (BRAID_COMPACTION=off; the bench's drop-oldest side).
    compaction: bool = True
    # Folders a session may be imported from (DESIGN §7): the server user's home by default.
    import_roots: list[Path] = field(default_factory=lambda: [Path.home()])
    import_max_file: int = 5 * 1024 * 1024
    # Boundaries (DESIGN §4): an import, an update from source or an upload stops past these
    # totals, counted as they arrive; git URLs take only these schemes, and a host that
    # resolves to a loopback/private/link-local address only when listed here (names or CIDRs).
    import_max_bytes: int = 1024 ** 3
    import_max_files: int = 200_000
    import_schemes: tuple[str, ...] = ("https",)
    import_hosts: tuple[str, ...] = ()
    # At most this many actions of one socket run at once; past that the server stops reading it.
    socket_inflight: int = 32
    # An open session's thread and repository are given back after this many idle seconds,
    # and at most this many stay open at once (least recently used released first).
    idle_seconds: float = 60.0
    open_sessions: int = 64
    # At most this many turns drive (model loop, tools, checkpoints) at once, the others
    # wait in order (live_runs.TurnGate); 0: no bound.
    active_turns: int = 16
    # Unset: the embedded SQLite files in the data dir. A postgresql:// URL: the index and
    # users in PostgreSQL, and several processes coordinated through it (a team server).
    database_url: str | None = None
    # The model's `spawn_sub_agents` and `merge_branches` tools (agent/orchestrate.py): on or
    # off, children run at once, levels of children below the user's run.
    subagent_tools: bool = True
    subagents_parallel: int = 4
    subagent_depth: int = 2

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        s = cls()
        if env.get("BRAID_DATA_DIR"):
            s.data_dir = Path(env["BRAID_DATA_DIR"]).expanduser()
        s.host = env.get("BRAID_HOST", s.host)
        s.port = int(env.get("BRAID_PORT", s.port))
        s.token = env.get("BRAID_TOKEN") or None
        s.model = env.get("BRAID_MODEL", s.model) or "demo"
        s.openai_base_url = env.get("OPENAI_BASE_URL") or None
        s.openai_api_key = env.get("OPENAI_API_KEY") or None
        mode = env.get("BRAID_CHECKPOINT", s.checkpoint)
        if mode not in CHECKPOINT_MODES:
            raise ValueError(f"BRAID_CHECKPOINT must be one of {', '.join(CHECKPOINT_MODES)}")
        s.checkpoint = mode
        s.model_timeout = _number(env, "BRAID_MODEL_TIMEOUT", s.model_timeout)
        s.model_retries = int(_number(env, "BRAID_MODEL_RETRIES", s.model_retries))
        if env.get("BRAID_ENDPOINTS"):
            s.endpoints_file = Path(env["BRAID_ENDPOINTS"]).expanduser()
        s.tool_choice = env.get("BRAID_TOOL_CHOICE") or None
        s.compaction = env.get("BRAID_COMPACTION", "on").lower() not in (
            "off", "0", "false", "no")
        if env.get("BRAID_INSTRUCTIONS"):
            s.instructions_file = Path(env["BRAID_INSTRUCTIONS"]).expanduser()
        s.idle_seconds = _number(env, "BRAID_IDLE_SECONDS", s.idle_seconds)
        s.open_sessions = int(_number(env, "BRAID_OPEN_SESSIONS", s.open_sessions))
        s.active_turns = max(0, int(_number(env, "BRAID_ACTIVE_TURNS", s.active_turns)))
        s.database_url = env.get("BRAID_DATABASE_URL") or None
        if s.database_url and not s.database_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("BRAID_DATABASE_URL must be a postgresql:// URL")
        s.shell = env.get("BRAID_SHELL", "off").lower() in ("on", "1", "true", "yes")
        tokens = env.get("BRAID_CONTEXT_TOKENS", "").strip()
        if tokens:
            if not tokens.isdigit() or int(tokens) < 100:
                raise ValueError("BRAID_CONTEXT_TOKENS must be a whole number of at least 100")
            s.context_tokens = int(tokens)
        if env.get("BRAID_IMPORT_ROOTS"):
            s.import_roots = [Path(p).expanduser() for p in
                              env["BRAID_IMPORT_ROOTS"].split(os.pathsep) if p]
        cap = env.get("BRAID_IMPORT_MAX_FILE", "").strip()
        if cap:
            if not cap.isdigit():
                raise ValueError("BRAID_IMPORT_MAX_FILE must be a whole number of bytes")
            s.import_max_file = int(cap)
        s.import_max_bytes = _whole(env, "BRAID_IMPORT_MAX_BYTES", s.import_max_bytes)
        s.import_max_files = _whole(env, "BRAID_IMPORT_MAX_FILES", s.import_max_files)
        s.import_schemes = _words(env, "BRAID_IMPORT_SCHEMES", s.import_schemes, lower=True)
        s.import_hosts = _words(env, "BRAID_IMPORT_HOSTS", s.import_hosts, lower=True)
        s.socket_inflight = max(1, _whole(env, "BRAID_SOCKET_INFLIGHT", s.socket_inflight))
        s.subagent_tools = env.get("BRAID_SUBAGENT_TOOLS", "on").lower() not in (
            "off", "0", "false", "no")
        s.subagents_parallel = max(1, _whole(env, "BRAID_SUBAGENTS_PARALLEL",
                                             s.subagents_parallel))
        s.subagent_depth = _whole(env, "BRAID_SUBAGENT_DEPTH", s.subagent_depth)
        return s


def _number(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {raw!r}") from None
    if value < 0 or value != value:
        raise ValueError(f"{name} must not be negative")
    return value


def _whole(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number, not {raw!r}")
    return int(raw)


def _words(env: dict[str, str], name: str, default: tuple[str, ...], *,
           lower: bool = False) -> tuple[str, ...]:
    raw = env.get(name)
    if raw is None:
        return default
    words = (w.strip() for w in raw.split(","))
    return tuple(w.lower() if lower else w for w in words if w)
