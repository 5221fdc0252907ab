"""One grammar for the branches Braid makes (git/branches.py): made, told apart and shown
there; no other module of server/ spells `sub_` or `run/`."""

from __future__ import annotations

import ast
from pathlib import Path

from server.git import branches

ROOT = Path(__file__).resolve().parents[2]


def test_a_sub_agent_branch_is_made_read_and_shown_by_one_grammar() -> None:
    label = branches.clean_label("Red team/2")
    name = branches.sub_branch("0123456789abcdef", label)
    assert label == "Red-team-2" and branches.SUB_BRANCH.fullmatch(name)
    assert name.startswith("sub_0123456789_Red-team-2_") and branches.is_sub(name)
    assert not branches.is_run(name) and not branches.is_sub("main")
    assert branches.branch_words(name) == "sub-agent Red-team-2"
    assert branches.short_name(name) == f"Red-team-2·{name[-8:-4]}"
    run = branches.run_branch("a" * 32)
    assert branches.is_run(run) and branches.RUN_BRANCH.fullmatch(run)
    assert branches.branch_words("main") == branches.short_name("main") == "main"


def test_no_other_module_spells_the_grammar() -> None:
    found = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        if path == ROOT / "server" / "git" / "branches.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value if node.value in ("sub_", "run/") else None
            elif isinstance(node, ast.JoinedStr) and node.values \
                    and isinstance(node.values[0], ast.Constant):
                first = str(node.values[0].value)
                text = first if first.startswith(("sub_", "run/")) else None
            if text is not None:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {text!r}")
    assert not found
