"""Markdown for model output, rendered without raw HTML: tags the model writes are shown as
text, and markdown-it's link validation drops javascript:/vbscript:/data: links."""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup

from server.web.render.highlight import highlight_code

# Fenced code is highlighted by Pygments (it escapes the code itself).
_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False,
                                "highlight": lambda code, lang, _attrs: highlight_code(code, lang)})
_md.enable("table").enable("strikethrough")


@lru_cache(maxsize=256)
def _rendered(text: str) -> Markup:
    return Markup(_md.render(text))  # noqa: S704 - html=False: markdown-it escapes input


def render_markdown(text: str | None) -> Markup:
    """The same text renders the same: a page draws each of its 30 turns' answers again on
    every load, a tenth of the page's time (issue 30), so the newest ones are kept."""
    return _rendered(text or "")
