"""Syntax highlighting on the server (Pygments): whole files in the file panel, fenced code in
answers, and the lines of diffs. No script and no stylesheet comes from a CDN; the colours are
one stylesheet made here (`/highlight.css`)."""

from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_by_name, get_lexer_for_filename
from pygments.util import ClassNotFound
from starlette.requests import Request
from starlette.responses import Response

MAX_HIGHLIGHT = 400_000  # bytes: bigger files are shown as plain text
STYLE = "friendly"
DARK_STYLE = "github-dark"
_INLINE = HtmlFormatter(nowrap=True, style=STYLE)


@lru_cache(maxsize=256)
def lexer_for_path(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        plain: Lexer = TextLexer(stripnl=False, ensurenl=False)  # the stub leaves it Any
        return plain


@lru_cache(maxsize=128)
def lexer_for_lang(lang: str) -> Lexer | None:
    try:
        return get_lexer_by_name(lang, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def as_text(data: bytes) -> str | None:
    """The file as text, or None when it is binary."""
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def highlight_lines(path: str, text: str) -> list[Markup]:
    """The file's lines, each highlighted (for the numbered file view)."""
    if len(text) > MAX_HIGHLIGHT:
        return [Markup(escape(line)) for line in text.split("\n")]
    html = highlight(text, lexer_for_path(path), _INLINE)
    lines = html.split("\n")
    if text and not text.endswith("\n") and lines and lines[-1] == "":
        lines.pop()
    elif text.endswith("\n") and lines and lines[-1] == "":
        lines.pop()
    # A token spanning lines (a docstring) keeps its span open across "\n": close and reopen.
    return [Markup(line) for line in _balance(lines)]


def _balance(lines: list[str]) -> list[str]:
    out: list[str] = []
    open_tags: list[str] = []
    for line in lines:
        prefix = "".join(open_tags)
        body = prefix + line
        # Track <span ...> / </span> nesting of this line.
        i = 0
        while True:
            a, b = line.find("<span", i), line.find("</span>", i)
            if a == -1 and b == -1:
                break
            if a != -1 and (b == -1 or a < b):
                end = line.find(">", a)
                open_tags.append(line[a:end + 1])
                i = end + 1
            else:
                if open_tags:
                    open_tags.pop()
                i = b + 7
        out.append(body + "</span>" * len(open_tags))
    return out


def highlight_code(code: str, lang: str) -> str:
    """A fenced code block of an answer (markdown-it's `highlight` hook)."""
    lexer = lexer_for_lang(lang) if lang else None
    if lexer is None or len(code) > MAX_HIGHLIGHT:
        inner = str(escape(code))
    else:
        inner = highlight(code, lexer, _INLINE)
    lang_attr = f' data-lang="{escape(lang)}"' if lang else ""
    return f'<pre class="hl code-block"{lang_attr}><code>{inner}</code></pre>'


def highlight_diff_line(path: str | None, line: str) -> Markup:
    """One line of a diff without its +/-/space sign, highlighted as the file's language."""
    if not path or len(line) > 2000:
        return Markup(escape(line))
    html = highlight(line, lexer_for_path(path), _INLINE).rstrip("\n")
    return Markup(html)


@lru_cache(maxsize=1)
def stylesheet() -> str:
    where = [".hl", ".md pre.hl", ".diff"]
    css: str = HtmlFormatter(style=STYLE).get_style_defs(where)
    # The dark theme (static/theme.css) follows the system: so do the code's colours.
    dark: str = HtmlFormatter(style=DARK_STYLE).get_style_defs(where)
    return css + "\n@media (prefers-color-scheme: dark) {\n" + dark + "\n}\n"


async def stylesheet_route(request: Request) -> Response:
    return Response(stylesheet(), media_type="text/css",
                    headers={"cache-control": "public, max-age=3600"})
