"""One rule for titles (base/names.py): what a rename refuses, an automatic title takes out,
so a first message's control or bidi characters reach neither the page nor `git log`. Real
Braid, the demo model, the session repository read with the git CLI."""

from __future__ import annotations

import json

import pytest

from conftest import git, run_to_end
from server.app.braid import Braid
from server.base import names
from server.base.errors import BadRequest
from server.features import session_meta, sessions
from server.web.params import session_changes

NASTY = "\x1b[31mred\x1b[0m \u202eevil\u202c\tname\u2028more"


def test_plain_takes_out_what_a_rename_refuses() -> None:
    assert names.title_refusal(NASTY)
    plain = names.plain_title(NASTY)
    assert names.title_refusal(plain) is None
    assert plain == "[31mred[0m evil name more"
    assert names.plain_title("👩\u200d💻 coder") == "👩\u200d💻 coder"  # the emoji's joiner stays
    assert names.plain_title("x" * 500) == "x" * names.MAX_TITLE


async def test_a_first_message_title_keeps_no_control_or_bidi_character(braid: Braid) -> None:
    """Before, the first line went into session.json as it was: ESC reached `git log` and a
    right-to-left override reversed the sidebar, where a rename to the same text is refused."""
    sid = (await sessions.create_session(braid, "local"))["session_id"]
    await run_to_end(braid, "local", sid, f"\n{NASTY}\nsay hi")
    path = braid.store.path(sid)
    title = json.loads(git(path, "show", "HEAD:session.json"))["title"]
    assert title == "[31mred[0m evil name"  # its first line: U+2028 ends a line too
    assert (await sessions.session_info(braid, "local", sid))["title"] == title
    log = git(path, "log", "--format=%B%n%(trailers)", "--all")
    assert "\x1b" not in log and "\u202e" not in log
    with pytest.raises(BadRequest, match="control characters"):
        session_changes({"title": NASTY})


async def test_a_title_given_at_creation_follows_the_same_rule(braid: Braid) -> None:
    sid = (await sessions.create_session(braid, "local", title=NASTY))["session_id"]
    path = braid.store.path(sid)
    assert json.loads(git(path, "show", "HEAD:session.json"))["title"] == names.plain_title(NASTY)
    assert "\x1b" not in git(path, "log", "--format=%B", "--all")
    info = await session_meta.update_session(braid, "local", sid, {"title": "Renamed"})
    assert info["title"] == "Renamed"
