"""Red-team of issue 21, row 13 again: a password holding an unencoded `@` (curl, httpx and
urllib all take the last `@` of the authority as the end of the user-info, so such a URL
works) must not show its tail after the first `@`."""

from __future__ import annotations

from server.model.endpoints import redact_url


def test_a_password_with_an_at_sign_is_hidden_whole() -> None:
    shown = redact_url("http://user:p@ss-SEKRET@127.0.0.1:8080/v1")
    assert "SEKRET" not in shown and "ss-" not in shown
    assert shown == "http://***@127.0.0.1:8080/v1"


def test_only_the_authority_is_taken_and_text_after_the_url_is_kept() -> None:
    text = "the server at http://u:pw@host/v1?a=b failed; mail admin@example.org"
    assert redact_url(text) == \
        "the server at http://***@host/v1?a=*** failed; mail admin@example.org"
    assert redact_url("http://host/v1/x@y") == "http://host/v1/x@y"  # a path's @: no user-info


def test_a_fragment_is_hidden_in_urls_and_as_a_secret() -> None:
    """A key pasted after `#` is never sent, but it is no less a key: hidden in a URL, and
    as free text in an error that quotes it."""
    from server.model.endpoints import Endpoint

    assert redact_url("see http://host:1/v1#sk-SEKRET now") == "see http://host:1/v1#*** now"
    assert redact_url("issue #12 at http://host/v1") == "issue #12 at http://host/v1"
    endpoint = Endpoint("e", "http://host:1/v1?api-version=2#sk-SEKRET")
    assert endpoint.where() == "http://host:1/v1?api-version=2#***"
    assert endpoint.scrub("bad key sk-SEKRET") == "bad key ***"
