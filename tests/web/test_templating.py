"""The page's Jinja environment (server/web/render/templating.py) draws what stock Jinja draws:
its includes hand their output up whole in a context made in one copy, its contexts gather
the globals' names when asked, its templates are kept by name (issue 30)."""

from __future__ import annotations

import json
from typing import Any

import jinja2

from server.web.render.templating import RecordEnvironment, render, shown_args

SOURCES = {
    "page.html": (
        "{% set top = 'T' %}{% import 'lib.html' as lib with context %}"
        "{% for item in items %}{% with shown = item * 2 %}{% include 'row.html' %}"
        "{% endwith %}{% endfor %}"
        "{% set held %}[{% include 'row.html' %}]{% endset %}{{ held }}"
        "{% macro boxed(v) %}<{% include 'leaf.html' %}{{ v }}>{% endmacro %}{{ boxed('m') }}"
        "{{ lib.shout() }}{% include 'leaf.html' %}"),
    "row.html": ("{% set mine = (shown or 0) ~ '!' %}"
                 "({{ top }} {{ item | default('none') }} {{ shown | default('-') }} {{ mine }}"
                 "{% include 'leaf.html' %})"),
    "leaf.html": "<i>{{ top }}{{ greeting }}{{ '&' }}</i>",
    "lib.html": "{% macro shout() %}{{ top | lower }}{{ greeting }}{% endmacro %}",
}


def _both(**ctx: Any) -> tuple[str, str]:
    ours = RecordEnvironment(loader=jinja2.DictLoader(SOURCES), autoescape=True)
    ours.auto_reload = False
    stock = jinja2.Environment(loader=jinja2.DictLoader(SOURCES), autoescape=True)
    for env in (ours, stock):
        env.globals["greeting"] = "hi<"
    return (ours.get_template("page.html").render(**ctx),
            stock.get_template("page.html").render(**ctx))


def test_includes_macros_and_imports_draw_what_stock_jinja_draws() -> None:
    ours, stock = _both(items=[1, 2, 3])
    assert ours == stock
    assert "(T 2 4 4!<i>Thi&lt;&amp;</i>)" in ours  # the loop's and the with's names seen
    assert "[(T none - 0!" in ours  # in a buffered block: an unset local shadows nothing
    assert "m>thi&lt;<i>" in ours  # an import with context sees the page's names, the globals


def test_an_empty_page_and_a_template_asked_twice_are_the_same() -> None:
    ours = RecordEnvironment(loader=jinja2.DictLoader(SOURCES), autoescape=True)
    ours.auto_reload = False
    assert ours.get_template("row.html") is ours.get_template("row.html")
    assert _both(items=[])[0] == _both(items=[])[1]


def call(arguments: object) -> Any:
    return {"id": "c1", "type": "function",
            "function": {"name": "write_file", "arguments": arguments}}


def test_a_tool_cards_arguments_show_whatever_the_model_sent() -> None:
    sent = json.dumps({"path": "notes/a.txt", "content": "é <b>"})
    assert shown_args(call(sent)) == ("notes/a.txt",
                                      '{\n  "path": "notes/a.txt",\n  "content": "é <b>"\n}')
    assert shown_args(call(sent)) is shown_args(call(sent))  # read once
    assert shown_args(call("{not json")).text == '{\n  "(unparsed)": "{not json"\n}'
    assert shown_args(call({"command": "ls"})) == ("ls", '{\n  "command": "ls"\n}')
    assert shown_args(call("[1, 2]")).text == '{\n  "value": [\n    1,\n    2\n  ]\n}'
    html = render("_tool_card.html", call=call(sent), result=None, run_id="r1",
                  live_output="")
    assert '<code class="tool-target">notes/a.txt</code>' in html
    assert "&#34;content&#34;: &#34;é &lt;b&gt;&#34;" in html  # escaped in the card


def test_a_turns_footer_is_the_same_drawn_alone_or_in_its_turn() -> None:
    files = [{"path": "a.txt", "status": "added"}, {"path": "b.txt", "status": "modified"}]
    turn = {"type": "turn", "run_id": "r" * 32, "files": files,
            "user": {"id": "u" * 32, "role": "user", "content": "hi", "run_id": "r" * 32},
            "parts": [], "run": {"status": "COMPLETED", "reverted_files": ["b.txt"]}}
    alone = render("_turn_footer.html", turn=turn, run=turn["run"], rid="r" * 32,
                   status="COMPLETED")
    assert "1 of 2 reverted" in alone and 'data-act="unrevert_turn"' in alone
    whole = render("_turn.html", turn=turn)
    assert alone in whole
    assert 'class="edit-rerun"' in whole and 'class="rewind-menu"' in whole
