"""Red-team of issue 21, row 15 again: an import or export path the file system cannot hold
(a part over 255 bytes, or over PATH_MAX in all) is a 400, not a 500 `internal error:
OSError`, for imports and exports alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import Server

LONG_PART = "x" * 300
LONG_PATH = "/".join(["a" * 200] * 25)


def test_a_path_too_long_for_the_file_system_is_a_bad_request(
        server_factory: Any, tmp_path: Path) -> None:
    roots = tmp_path / "home"
    roots.mkdir()
    srv: Server = server_factory(BRAID_IMPORT_ROOTS=str(roots))
    sid = srv.new_session()
    for tail in (LONG_PART, f"{LONG_PART}/sub", LONG_PATH):
        where = f"{roots}/{tail}"
        for source in ({"path": where}, {"git": where}):
            status, body = srv.api("POST", "/api/sessions", {"title": "t", "source": source})
            assert (status, body["error"]["code"]) == (400, "bad_request"), body
        status, body = srv.api("POST", f"/api/sessions/{sid}/export",
                               {"to": "folder", "path": where})
        assert (status, body["error"]["code"]) == (400, "bad_request"), body
