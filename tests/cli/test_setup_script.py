"""scripts/setup (which scripts/run and scripts/test call first) installs the packages once:
a restart of scripts/run runs no pip while pyproject.toml and the checkout's place are the
ones the venv was set up for (issue 23: every restart took 13 s reinstalling)."""

from __future__ import annotations

import subprocess

from conftest import ROOT


def setup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "scripts" / "setup"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_a_second_setup_installs_nothing() -> None:
    setup("--test", "--quick")  # whatever this checkout needs, once
    stamp = (ROOT / ".venv" / ".braid-setup").read_text()
    assert str(ROOT) in stamp and stamp.strip().endswith("test=1")
    again = setup("--test", "--quick")
    assert again.returncode == 0, again.stderr
    assert "installing" not in again.stderr and again.stdout == ""
    # Without --test the test tools already there are enough: nothing installed either.
    plain = setup()
    assert plain.returncode == 0 and "installing" not in plain.stderr, plain.stderr
