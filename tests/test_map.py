"""The map is true (issue 29 item 7): docs/DESIGN.md's Layout names every module of server/
in its folder's block, and "A turn in six files" names the entries the code really takes."""

from __future__ import annotations

import re
from pathlib import Path

from server.features import queue
from server.web.actions import by_name

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs" / "DESIGN.md").read_text()


def layout_blocks(*, headed: bool = False) -> dict[str, set[str]]:
    """{folder: the `name.py` the Layout names under its `server/<folder>/` header}; `headed`:
    only those that open a line (a module's own entry, not a mention of another's)."""
    layout = DESIGN.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, set[str]] = {}
    folder = None
    for line in layout.splitlines():
        if line.startswith("server/"):
            folder = line.split()[0].rstrip("/")
            blocks.setdefault(folder, set())
        elif folder and line.startswith(" "):
            found = re.findall(r"^  ((?:\w+\.py(?:, )?)+)", line) if headed else [line]
            for text in found:
                blocks[folder].update(re.findall(r"\b(\w+\.py)\b", text))
        else:
            folder = None
    return blocks


def test_the_layout_names_every_module_in_its_folder() -> None:
    blocks = layout_blocks()
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "server").rglob("*.py"))
               if p.name != "__init__.py"
               and p.name not in blocks.get(str(p.parent.relative_to(ROOT)), set())]
    assert not missing, f"docs/DESIGN.md's Layout does not name {missing}"
    stale = [f"{folder}/{name}" for folder, names in layout_blocks(headed=True).items()
             for name in names
             if not (ROOT / folder / name).exists()]
    assert not stale, f"docs/DESIGN.md's Layout names modules that are gone: {stale}"


def test_a_turn_in_six_files_names_the_entries_taken() -> None:
    path = DESIGN.split("**A turn in six files.**", 1)[1].split("\n\n", 2)[1]
    steps = re.findall(r"^\d\. `([\w/]+\.py)`", path, re.M)
    assert len(steps) == 6 and all((ROOT / "server" / s).exists() for s in steps), steps
    # Step 1: the socket's send_message is features/queue.send, which starts the turn.
    assert by_name("send_message").call is queue.send
    assert "`send_message` → `features/queue.send`" in path
