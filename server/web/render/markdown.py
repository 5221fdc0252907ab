"""Markdown for model output, rendered without raw HTML: tags the model writes are shown as
text, and markdown-it's link validation drops javascript:/vbscript:/data: links."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markupsafe import Markup

from server.web.render.highlight import highlight_code

# Fenced code is highlighted by Pygments (it escapes the code itself).
_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False,
                                "highlight": lambda code, lang, _attrs: highlight_code(code, lang)})
_md.enable("table").enable("strikethrough")


def render_markdown(text: str | None) -> Markup:
    return Markup(_md.render(text or ""))  # noqa: S704 - html=False: markdown-it escapes input
