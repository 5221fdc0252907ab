"""The quick set (`scripts/test --quick`): conftest.py's markers leave out what needs Chromium,
PostgreSQL, llama-server or kills, and every module of the folders that mirror server/'s
packages (tests/<package>/) keeps tests in it. Read from a real collection with the
expression scripts/test uses; itself `slow` (a collection of the whole suite), so CI checks
what the quick set holds."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT

# tests/<package>/ for each package of server/ (tests/faults and live are by kind).
MIRRORS = ("base", "git", "store", "model", "agent", "features", "app", "web", "cli")
# tests/backends/ mirrors server/backends/ too, but all of it needs PostgreSQL (marked pg).


def test_the_tests_mirror_the_packages() -> None:
    packages = {p.parent.name for p in (ROOT / "server").glob("*/__init__.py")}
    assert packages - {"backends"} == set(MIRRORS)  # backends: tests/backends/, tests/store's pg
    for layer in MIRRORS:
        assert list((ROOT / "tests" / layer).glob("test_*.py")), f"tests/{layer}/ is empty"


def quick_expression() -> str:
    found = re.search(r'pytest -q -m "([^"]+)"', (ROOT / "scripts" / "test").read_text())
    assert found, "scripts/test --quick has no -m expression"
    return found.group(1)


def collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_quick_set_leaves_out_the_marked_and_keeps_every_mirrored_module() -> None:
    expression = quick_expression()
    assert expression == "not browser and not pg and not llama and not crash and not slow"
    quick = collected("-m", expression)
    files = {test.split("::")[0] for test in quick}
    assert not {f for f in files if f.startswith(("playwright/", "tests/backends/", "tests/live/"))}
    assert "tests/faults/test_crash_matrix.py" not in files
    assert not {t for t in quick if "[postgresql]" in t}  # test_index's PostgreSQL backend
    assert "tests/store/test_index.py" in files and "tests/test_house.py" in files
    modules = {str(p.relative_to(ROOT)) for layer in MIRRORS
               for p in (ROOT / "tests" / layer).glob("test_*.py")}
    assert modules - files == set(), "modules with no test in the quick set"
