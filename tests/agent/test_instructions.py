"""Project instructions (DESIGN §4): the branch's `workdir/AGENTS.md` and the operator's
BRAID_INSTRUCTIONS reach the model after the base prompt (the demo's `notes` lists them), at
most 32 KiB each; they are files of the branch: a sibling without the file does not get
them, reverting the turn that wrote it takes them away, a link is never followed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from conftest import git, new_session, run_turn
from server.agent.compaction import instructions
from server.features.revert import revert_turn
from server.features.timetravel import continue_run_to_end


def answer(run: Any) -> str:
    return str(run["messages"][-1]["content"])


async def test_agents_md_reaches_the_model_and_follows_the_branch(braid: Any) -> None:
    sid, path = await new_session(braid)
    first = await run_turn(braid, sid, "say hello")
    assert answer(await run_turn(braid, sid, "notes")) == "no notes"
    wrote = await run_turn(braid, sid, "write AGENTS.md Always answer in French.")
    notes = await run_turn(braid, sid, "notes")
    assert answer(notes) == "Project instructions (AGENTS.md):\nAlways answer in French.\n"
    blob = git(path, "rev-parse", "HEAD:workdir/AGENTS.md").strip()
    assert notes["context"]["instructions"] == blob
    assert notes["context"]["parts"]["instructions"] > 0

    # A sibling of the first turn, before the file existed, is not told.
    sibling = await continue_run_to_end(braid, "local", sid, first["run_id"], input="notes")
    assert answer(sibling) == "no notes"
    assert "instructions" not in sibling["context"]

    # Back on main, reverting the turn that wrote the file takes the instructions away.
    from server.features.sessions import checkout

    await checkout(braid, "local", sid, "main")
    assert answer(await run_turn(braid, sid, "notes")).startswith("Project instructions")
    await revert_turn(braid, "local", sid, wrote["run_id"])
    after = answer(await run_turn(braid, sid, "notes"))  # the revert's own note only
    assert "Project instructions" not in after and "was reverted" in after


async def test_a_turn_that_writes_agents_md_follows_it_in_its_next_call(braid: Any) -> None:
    sid, _ = await new_session(braid)
    done = await run_turn(braid, sid, "write AGENTS.md Be brief.\nbatch\nread AGENTS.md")
    assert done["context"]["parts"]["instructions"] > 0  # its last call had the file


async def test_instructions_are_cut_at_32_kib_with_a_note(braid: Any) -> None:
    sid, path = await new_session(braid)
    (path / "workdir" / "AGENTS.md").write_text("é" + "x" * 40_000)  # a user's edit
    text = answer(await run_turn(braid, sid, "notes"))
    head, _, rest = text.partition("\n")
    assert head == "Project instructions (AGENTS.md):"
    body, _, note = rest.rpartition("\n")
    assert len(body.encode()) <= instructions.MAX_BYTES
    assert len(body.encode()) >= instructions.MAX_BYTES - 1  # cut at a character, not before
    assert note.startswith("[AGENTS.md was cut at 32 KiB") and "7,234 bytes" in note


async def test_a_link_called_agents_md_is_not_followed(braid: Any, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    sid, path = await new_session(braid)
    os.symlink(secret, path / "workdir" / "AGENTS.md")
    done = await run_turn(braid, sid, "notes")
    assert answer(done) == "no notes"
    assert "secret" not in json.dumps(done)


async def test_the_operator_s_instructions_come_first_and_follow_edits(
        make_braid: Any, tmp_path: Path) -> None:
    rules = tmp_path / "rules.md"
    rules.write_text("Never delete files.")
    braid = await make_braid(instructions_file=rules)
    sid, _ = await new_session(braid)
    await run_turn(braid, sid, "write AGENTS.md Use tabs.")
    assert answer(await run_turn(braid, sid, "notes")) == (
        "Server instructions:\nNever delete files. | "
        "Project instructions (AGENTS.md):\nUse tabs.\n")
    rules.write_text("Never delete files, ever.")
    assert "ever." in answer(await run_turn(braid, sid, "notes"))
    rules.unlink()
    assert answer(await run_turn(braid, sid, "notes")).startswith("Project instructions")


def test_the_setting_is_read_from_the_environment(tmp_path: Path) -> None:
    from server.base.settings import Settings

    assert Settings.from_env({}).instructions_file is None
    assert Settings.from_env({"BRAID_INSTRUCTIONS": str(tmp_path / "a.md")}).instructions_file \
        == tmp_path / "a.md"
