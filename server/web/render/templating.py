"""The Jinja2 environment shared by pages and socket frames, so both render the same partials."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.utils import missing
from markupsafe import Markup, escape
from starlette.templating import Jinja2Templates

from server.base.records import MessageRecord, ToolCall
from server.base.results import TranscriptItem
from server.store.search import MARK_CLOSE, MARK_OPEN
from server.web.render.markdown import render_markdown
from server.web.render.names import branch_label, humanize, note_for_people, readable
from server.web.render.turn_view import children_tokens, tokens_of, turn_flags

ROOT = Path(__file__).resolve().parents[3]
_DICT_ATTRIBUTES = frozenset(dir(dict))


class WholeIncludes(CodeGenerator):
    """Jinja's code for an include, its output handed up whole, in a context made by
    `RecordEnvironment.included`: Jinja passes each piece an included template yields up
    through every template that includes it, one Python loop a level (the ~4,000 pieces of a
    page of 30 turns went up six or seven levels each: session, base, body, transcript,
    items, turn, footer; issue 30). Same text, same order."""

    def visit_Include(self, node: nodes.Include, frame: Frame) -> None:
        if not node.with_context or node.ignore_missing or self.environment.is_async \
                or not isinstance(node.template, nodes.Const):
            super().visit_Include(node, frame)
            return
        self.writeline("template = environment.get_template(", node)
        self.visit(node.template, frame)
        self.write(f", {self.name!r})")
        self.writeline("gen = template.root_render_func(environment.included(template, "
                       f"context, {self.dump_local_context(frame)}))")
        self.writeline("try:")
        self.indent()
        self.simple_write("environment.concat(gen)", frame)
        self.outdent()
        self.writeline("finally: gen.close()")


class RecordContext(Context):
    """Jinja's context, the names of its globals gathered when asked: Jinja makes a set of
    the ~30 globals for every context, one an include (~450 a page), and only an `{% import
    ... with context %}` reads it."""

    def __init__(self, environment: jinja2.Environment, parent: dict[str, Any],
                 name: str | None, blocks: dict[str, Callable[[Context], Iterator[str]]],
                 globals: MutableMapping[str, Any] | None = None) -> None:
        super().__init__(environment, parent, name, blocks)
        self._globals = globals

    @property  # Context sets a plain attribute: read here when asked
    def globals_keys(self) -> set[str]:
        return set() if self._globals is None else set(self._globals)

    @globals_keys.setter
    def globals_keys(self, value: set[str]) -> None:
        """Context.__init__'s empty set, given no globals: the names come from _globals."""


class RecordEnvironment(jinja2.Environment):
    """Jinja's environment, a record's field (`turn.run_id`, a dict's key) read first: Jinja
    tries `getattr` first and raises an AttributeError for every field of a dict, ~3,800 a
    page of 30 turns (issue 30). The same answers: a dict's own attributes (its methods)
    still come first, then its keys, then undefined."""

    code_generator_class = WholeIncludes
    context_class = RecordContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read: dict[str, jinja2.Template] = {}

    def _load_template(self, name: str,
                       globals: MutableMapping[str, Any] | None) -> jinja2.Template:
        """A template read once is kept by name while templates are not reloaded: Jinja's
        cache takes a lock and moves the name in a queue on every include (~450 a page)."""
        if globals or self.auto_reload:
            return super()._load_template(name, globals)
        found = self._read.get(name)
        if found is None:
            found = self._read[name] = super()._load_template(name, globals)
        return found

    def included(self, template: jinja2.Template, context: Context,
                 here: dict[str, Any]) -> Context:
        """An included template's context: what Jinja's `template.new_context(
        context.get_all(), True, here)` makes, in one copy of the names instead of two."""
        names = {**context.parent, **context.vars}
        for name, value in here.items():
            if value is not missing:
                names[name] = value
        return self.context_class(self, names, template.name, template.blocks,
                                  globals=template.globals)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


templates = Jinja2Templates(env=RecordEnvironment(
    loader=jinja2.FileSystemLoader(str(ROOT / "templates")),
    # Every template is HTML (templates/*.html): escaped, without asking its name's ending
    # for every context made (select_autoescape's answer for these names).
    autoescape=True))
# Templates are read once: checking each file's mtime on every include cost a stat per
# partial rendered (hundreds on a page of 30 turns).
templates.env.auto_reload = False
env = templates.env


def dom_id(value: object) -> str:
    """A string safe inside an HTML id and a CSS selector."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", str(value))


def rewinds_of(transcript: object) -> dict[str, str]:
    """A transcript's standing files-only rewinds, {user message id: rewind id}."""
    rewinds = transcript.get("rewinds") if isinstance(transcript, dict) else None
    return rewinds if isinstance(rewinds, dict) else {}


class Block(TypedDict, total=False):
    """A piece of an answer's bubble: a user message, thinking, text, or a tool card."""

    kind: str  # "user" | "reasoning" | "text" | "tool"
    message: MessageRecord
    index: int
    text: str | None
    partial: bool | None
    superseded: bool
    call: ToolCall
    result: MessageRecord | None


class Segment(TypedDict):
    """A bubble of a turn: a user message and the answer's messages up to the next one."""

    user: MessageRecord | None
    index: int
    parts: list[MessageRecord]


def _raw_args(call: ToolCall) -> object:
    return (call.get("function") or {}).get("arguments") or "{}"  # a str, or not


def _args_of(raw: object) -> dict[str, Any]:  # free-form: what the model sent
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"(unparsed)": raw}
    return args if isinstance(args, dict) else {"value": args}


def _target(args: dict[str, Any]) -> str:
    return str(args.get("path") or args.get("command") or "")[:120]


def tool_target(call: ToolCall) -> str:
    return _target(_args_of(_raw_args(call)))


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


class ShownArgs(NamedTuple):
    """A tool call's arguments as its card shows them."""

    target: str  # what it works on: its path or command, cut short
    text: str  # all of them, pretty


def _show(raw: object) -> ShownArgs:
    args = _args_of(raw)
    return ShownArgs(_target(args), pretty(args))


_shown = lru_cache(maxsize=256)(_show)  # by the arguments' text


def shown_args(call: ToolCall) -> ShownArgs:
    """A call's card's arguments. The same arguments show the same: read and pretty-printed
    once (json's indenting encoder is pure Python), not twice a card on every page load."""
    raw = _raw_args(call)
    return _shown(raw) if isinstance(raw, str) else _show(raw)


def blocks(parts: list[MessageRecord]) -> list[Block]:
    """An answer's messages as what the bubble shows, in order: text, and tool cards with
    each call paired with its result."""
    results = {m.get("tool_call_id"): m for m in parts if m["role"] == "tool"}
    out: list[Block] = []
    for i, msg in enumerate(parts):
        if msg["role"] == "user":  # a continued run's later input, where it came; `index` is
            out.append({"kind": "user", "message": msg, "index": i + 1})  # its place in the run
            continue
        if msg["role"] != "assistant":
            continue
        if msg.get("reasoning"):  # DeepSeek/Qwen-style thinking: shown folded
            out.append({"kind": "reasoning", "text": msg["reasoning"]})
        if msg.get("content"):
            # A draft a broken stream left, answered again after a resume: folded away.
            superseded = bool(msg.get("partial")) and any(
                m["role"] == "assistant" and not m.get("partial") for m in parts[i + 1:])
            out.append({"kind": "text", "text": msg["content"], "partial": msg.get("partial"),
                        "superseded": superseded})
        for call in msg.get("tool_calls") or ():
            out.append({"kind": "tool", "call": call, "result": results.get(call.get("id"))})
    return out


def segments(turn: TranscriptItem) -> list[Segment]:
    """A turn as the bubbles it shows: each user message opens a segment (its own bubble),
    followed by the answer's messages up to the next one. A continued run holds several user
    messages; `index` is each one's place in the run (for Edit & rerun)."""
    out: list[Segment] = [{"user": turn.get("user"), "index": 0, "parts": []}]
    for i, msg in enumerate(turn.get("parts") or ()):
        if msg["role"] == "user":
            out.append({"user": msg, "index": i + 1, "parts": []})
        else:
            out[-1]["parts"].append(msg)
    return out


def filesize(value: object) -> str:
    if not isinstance(value, int):
        return ""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def ago(iso: object) -> str:
    """How long ago, in words (the page refreshes it; the exact time is on hover)."""
    try:
        then = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = (datetime.now(UTC) - then).total_seconds()
    if seconds < 45:
        return "just now"
    for size, unit in ((86400 * 365, "y"), (86400 * 30, "mo"), (86400, "d"), (3600, "h"),
                       (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def day_words(iso: object) -> str:
    """When a session was last active, as people say it: today's time, "Yesterday", or a
    date (the page says it again in the reader's time zone; the exact time on hover)."""
    try:
        then = datetime.fromisoformat(str(iso).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return ""
    days = (datetime.now(UTC).date() - then.date()).days
    if days <= 0:
        return then.strftime("%H:%M")
    if days == 1:
        return "Yesterday"
    if then.year == datetime.now(UTC).year:
        return f"{then.day} {then:%b}"
    return f"{then.day} {then:%b} {then.year}"


def marked(snippet: object) -> Markup:
    """A search hit's snippet as HTML: all of it escaped, each `«word»` in a <mark>."""
    parts = re.split(f"{MARK_OPEN}([^{MARK_OPEN}{MARK_CLOSE}]*){MARK_CLOSE}", str(snippet or ""))
    return Markup("").join(Markup("<mark>{}</mark>").format(p) if i % 2 else escape(p)
                           for i, p in enumerate(parts))


LONG_CHARS = 1500
LONG_LINES = 24


def is_long(text: object) -> bool:
    """Long enough to collapse behind "Show more"."""
    value = str(text or "")
    return len(value) > LONG_CHARS or value.count("\n") > LONG_LINES


def title_text(value: object) -> str:
    """A session title on one line: a typed `\\n` (the demo model's newline) or a real line
    break never shows as such."""
    return " ".join(str(value or "").replace("\\n", " ").split())


env.filters["markdown"] = render_markdown
env.filters["title_text"] = title_text
env.filters["ago"] = ago
env.filters["day_words"] = day_words
env.filters["marked"] = marked
env.filters["is_long"] = is_long
env.filters["filesize"] = filesize
env.filters["branch_label"] = branch_label
env.filters["humanize"] = humanize
env.filters["note_for_people"] = note_for_people
env.filters["readable"] = readable
env.filters["dom_id"] = dom_id
env.filters["pretty"] = pretty
env.globals["tool_target"] = tool_target
env.globals["shown_args"] = shown_args
env.globals["blocks"] = blocks
env.globals["segments"] = segments
env.globals["rewinds_of"] = rewinds_of
env.globals["turn_flags"] = turn_flags  # the turn's view model (turn_view.py)
env.globals["child_tokens"] = tokens_of  # a sub-agent card's tokens
env.globals["children_tokens"] = children_tokens


def render(name: str, **ctx: Any) -> str:
    return env.get_template(name).render(**ctx)
