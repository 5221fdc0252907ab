"""The default user's token without BRAID_TOKEN: made once, kept across restarts."""

from __future__ import annotations

import stat
from pathlib import Path

from server.app.braid import Braid
from server.base.settings import Settings
from server.store.users import DEFAULT_USER


async def start_stop(data_dir: Path, token: str | None = None) -> tuple[str, Braid]:
    braid = Braid(Settings(data_dir=data_dir, token=token))
    made = await braid.start()
    await braid.stop()
    return made, braid


async def test_token_is_kept_across_restarts_and_private(tmp_path: Path) -> None:
    first, braid = await start_stop(tmp_path)
    second, _ = await start_stop(tmp_path)
    assert first == second and len(first) >= 30
    assert braid.users.authenticate(first) == DEFAULT_USER
    mode = stat.S_IMODE((tmp_path / "token").stat().st_mode)
    assert mode == 0o600


async def test_braid_token_wins_and_replaces_the_old_one(tmp_path: Path) -> None:
    kept, _ = await start_stop(tmp_path)
    fixed, braid = await start_stop(tmp_path, token="fixed-token-value-123")
    assert fixed == "fixed-token-value-123"
    assert braid.users.authenticate("fixed-token-value-123") == DEFAULT_USER
    assert braid.users.authenticate(kept) is None
