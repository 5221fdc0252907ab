"""The settings table (server/base/settings.py): each setting declared once, one yes/no grammar,
a bad value a sentence naming the variable; the README's and docs/DESIGN.md's lists and the
shared contract's §7 agree with it; no other module of server/ reads a `BRAID_*` variable."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from server.base.settings import NO, YES, Settings, table

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\b(?:BRAID|OPENAI)_[A-Z_]*[A-Z]\b")
# Not settings: marks the server puts in its own children's environment to find them again.
MARKS = {"BRAID_SHELL_TAG", "BRAID_SERVER_MALLOC"}
# Not settings either: read by a test harness, never by the server (tests/faults/).
MARKS |= {"BRAID_POWERCUT_SERVER"}


def variables(*, later: bool = True) -> set[str]:
    return {r.variable for r in table() if later or not r.later}


def test_each_variable_is_declared_once() -> None:
    names = [r.variable for r in table()]
    assert len(names) == len(set(names))
    assert all(r.help and r.kind and r.default for r in table())


def test_every_yes_no_setting_takes_one_grammar_and_refuses_anything_else() -> None:
    yes_no = [r for r in table() if r.kind == "yes/no"]
    assert {r.variable for r in yes_no} >= {"BRAID_SUBAGENT_TOOLS", "BRAID_NO_BROWSER"}
    for r in yes_no:
        for word in YES + tuple(w.upper() for w in YES):
            assert getattr(Settings.from_env({r.variable: word}), r.attribute) is True
        for word in NO + tuple(w.title() for w in NO):
            assert getattr(Settings.from_env({r.variable: word}), r.attribute) is False
        # Before the table, BRAID_SUBAGENT_TOOLS=of (a typo) left the tools on, BRAID_SHELL=of
        # turned the shell off and BRAID_NO_BROWSER=on opened a browser: each guessed.
        with pytest.raises(ValueError, match=f"^{r.variable} must be on or off"):
            Settings.from_env({r.variable: "of"})
    # BRAID_SHELL takes the same words, `on` meaning the sandbox, plus `sandbox` and `host`.
    for word in YES + ("sandbox", "SANDBOX", ""):
        assert Settings.from_env({"BRAID_SHELL": word}).shell_mode == "sandbox"
    for word in NO:
        assert not Settings.from_env({"BRAID_SHELL": word}).shell
    assert Settings.from_env({"BRAID_SHELL": "host"}).shell_mode == "host"
    with pytest.raises(ValueError, match="^BRAID_SHELL must be sandbox"):
        Settings.from_env({"BRAID_SHELL": "of"})


def test_the_shell_takes_the_same_yes_no_words_beside_sandbox_and_host() -> None:
    assert [Settings.from_env({"BRAID_SHELL": w}).shell_mode for w in YES + NO] == (
        ["sandbox"] * len(YES) + ["off"] * len(NO))
    assert Settings.from_env({"BRAID_SHELL": "Host"}).shell_mode == "host"
    assert Settings.from_env({}).shell and not Settings.from_env({"BRAID_SHELL": "0"}).shell
    with pytest.raises(ValueError, match="^BRAID_SHELL must be sandbox"):
        Settings.from_env({"BRAID_SHELL": "of"})


def test_no_browser_takes_on_as_the_other_yes_nos_do() -> None:
    assert Settings.from_env({"BRAID_NO_BROWSER": "on"}).no_browser is True
    assert Settings.from_env({}).no_browser is False


@pytest.mark.parametrize("variable,bad", [
    ("BRAID_PORT", "80a"), ("BRAID_MODEL_TIMEOUT", "soon"), ("BRAID_CHECKPOINT", "never"),
    ("BRAID_SOCKET_INFLIGHT", "0"), ("BRAID_SUBAGENTS_PARALLEL", "0"),
    ("BRAID_DATABASE_URL", "mysql://x"), ("BRAID_CRASH_MODE", "explode"),
    ("BRAID_IMPORT_MAX_BYTES", "-1"), ("BRAID_CONTEXT_TOKENS", "99")])
def test_a_value_that_does_not_parse_is_a_sentence_naming_the_variable(
        variable: str, bad: str) -> None:
    with pytest.raises(ValueError, match=f"^{variable} must be .*, not '{re.escape(bad)}'$"):
        Settings.from_env({variable: bad})


def test_unset_or_blank_is_the_default_and_each_kind_reads_its_text() -> None:
    assert Settings.from_env({}) == Settings.from_env({r.variable: " " for r in table()})
    s = Settings.from_env({"BRAID_IMPORT_SCHEMES": "HTTP, https,", "BRAID_SHELL_TIMEOUT": "2.5",
                           "BRAID_IMPORT_ROOTS": f"/a{os.pathsep}~/b", "BRAID_PORT": "9",
                           "BRAID_SHELL_MAX_MEMORY": "1024"})
    assert s.import_schemes == ("http", "https") and s.shell_timeout == 2.5 and s.port == 9
    assert s.import_roots == [Path("/a"), Path("~/b").expanduser()]
    assert s.shell_max_memory == 1024


def test_only_reads_just_the_named_settings() -> None:
    s = Settings.from_env({"BRAID_CRASH_AT": "revert.after_files", "BRAID_PORT": "nope"},
                          only=("crash_at", "crash_mode"))
    assert (s.crash_at, s.crash_mode, s.port) == ("revert.after_files", "kill", 8000)


def _listed(text: str) -> set[str]:
    return set(NAME.findall(text)) - MARKS


def test_the_readme_lists_every_setting_in_use_and_only_those() -> None:
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"^- Settings:.*?(?=^\S|^- |\n\n)", readme, re.M | re.S)
    assert listed, "README.md has no '- Settings:' list"
    assert _listed(listed.group(0)) == variables(later=False)
    assert _listed(readme) <= variables(later=False)  # nothing named that is not read


def test_docs_design_lists_the_whole_table_and_names_no_other() -> None:
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    section = design.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    assert _listed(section) == variables()
    assert _listed(design) <= variables()


def test_the_shared_contract_names_no_setting_the_table_lacks() -> None:
    shared = ROOT.parent / "shared" / "DESIGN.md"  # /work/shared beside /work/main
    if not shared.exists():
        pytest.skip("the shared contract sits beside the checkout only in the team's layout")
    section = shared.read_text().split("## 7. Settings", 1)[1].split("\n## ", 1)[0]
    assert _listed(section) <= variables()


def test_no_module_but_the_table_reads_a_braid_variable() -> None:
    """A `BRAID_*` name as a value (not in a docstring or a message) anywhere in server/ but
    settings.py would be a second place a setting is read."""
    found = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "base":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                        ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings and node.value not in MARKS \
                    and re.fullmatch(r"(BRAID|OPENAI)_[A-Z_]+", node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
            if isinstance(node, ast.Attribute) and node.attr == "getenv":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} getenv")
    assert not found


def test_braid_settings_prints_the_table_and_no_secret() -> None:
    env = {**os.environ, "BRAID_TOKEN": "s3cret-token-xyz", "BRAID_PORT": "8123"}
    out = subprocess.run([sys.executable, "-m", "server.cli", "settings"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    for r in table():
        assert re.search(rf"^{r.variable} +{re.escape(r.kind)}, default ", out, re.M), r
    assert "[now: 8123]" in out and "s3cret" not in out
    bad = subprocess.run([sys.executable, "-m", "server.cli", "settings"], cwd=ROOT,
                         env={**env, "BRAID_PORT": "x"}, capture_output=True, text=True)
    assert bad.returncode != 0 and "BRAID_PORT must be a whole number" in bad.stderr
    assert "Traceback" not in bad.stderr
