"""How a real model's answers show on the page: reasoning folded, a draft a broken stream left
folded once the run answered again, a cut-off answer flagged, tokens and model per turn."""

from __future__ import annotations

from typing import Any

from server.web.render.templating import render


def turn(parts: list[dict[str, Any]], **run: Any) -> dict[str, Any]:
    return {"type": "turn", "run_id": "a" * 32, "files": [],
            "user": {"id": "u" * 32, "role": "user", "content": "hi", "run_id": "a" * 32},
            "parts": parts, "run": {"status": "COMPLETED", **run}}


def assistant(content: str, **extra: Any) -> dict[str, Any]:
    return {"id": "m" * 32, "role": "assistant", "content": content, "run_id": "a" * 32,
            **extra}


def test_reasoning_is_folded_and_tokens_and_model_show() -> None:
    html = render("_turn.html", turn=turn(
        [assistant("Paris.", reasoning="The user asks for a capital.")],
        model="qwen3", endpoint="local",
        usage={"prompt_tokens": 100, "completion_tokens": 20}))
    assert '<details class="reasoning"><summary>Reasoning</summary>' in html
    assert html.index("The user asks for a capital.") < html.index("Paris.")
    assert "details open" not in html
    assert '<span class="turn-model">qwen3</span> 120 tokens' in html
    assert "qwen3 · local: 100 prompt + 20 completion tokens" in html


def test_estimated_usage_and_a_cut_off_answer_are_marked() -> None:
    html = render("_turn.html", turn=turn(
        [assistant("A long ans", finish_reason="length")], model="smollm2",
        usage={"prompt_tokens": 40, "completion_tokens": 3, "estimated": True},
        warning="the answer was cut off: the model reached its token limit"))
    assert "≈43 tokens" in html and "estimated: the server sent no usage" in html
    assert '<span class="turn-warning">the answer was cut off' in html


def test_a_draft_answered_again_is_folded_but_a_last_partial_is_not() -> None:
    resumed = render("_turn.html", turn=turn(
        [assistant("Once upon", partial=True), assistant("Once upon a time.")]))
    assert "Interrupted draft (answered again below)" in resumed
    assert resumed.count("Once upon") == 2 and "Once upon a time." in resumed
    broken = render("_turn.html", turn=turn([assistant("Once upon", partial=True)],
                                            status="ERROR", error="cut off"))
    assert "Interrupted draft" not in broken and 'class="md partial"' in broken
