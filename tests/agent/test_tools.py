"""The agent's file tools on real files: behaviour, patches and, above all, confinement."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from server.agent.tool_paths import PathEscape
from server.agent.tools import LIST_LIMIT, ToolResult, Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workdir holding a file that no tool call may change."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    return out


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def ws(root: Path, calls: list[str]) -> Workspace:
    return Workspace(root, before_write=calls.append)


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder` (without following links) with its content or link target."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "dir"
    return out


def ok(result: ToolResult) -> ToolResult:
    assert not result.is_error, result.content
    return result


def err(result: ToolResult, *words: str) -> ToolResult:
    assert result.is_error, result.content
    assert result.content.startswith("error: ")
    assert result.changed == []
    for word in words:
        assert word in result.content, result.content
    return result


# ----------------------------------------------------------------------------- basic tools


def test_write_and_read(ws: Workspace, root: Path, calls: list[str]) -> None:
    r = ok(ws.execute("write_file", {"path": "src/a.txt", "content": "one\r\ntwo"}))
    assert r.changed == ["src/a.txt"]
    assert calls == ["src/a.txt"]
    # No newline translation either way.
    assert (root / "src/a.txt").read_bytes() == b"one\r\ntwo"
    assert ok(ws.execute("read_file", {"path": "./src//a.txt"})).content == "one\r\ntwo"
    assert ok(ws.execute("read_file", {"path": "src/a.txt"})).changed == []


def test_args_as_json_string(ws: Workspace, root: Path) -> None:
    r = ok(ws.execute("write_file", json.dumps({"path": "a.txt", "content": "hi"})))
    assert r.changed == ["a.txt"]
    assert (root / "a.txt").read_text() == "hi"


def test_read_errors_and_invalid_utf8(ws: Workspace, root: Path) -> None:
    err(ws.execute("read_file", {"path": "nope.txt"}), "nope.txt", "does not exist")
    (root / "d").mkdir()
    err(ws.execute("read_file", {"path": "d"}), "directory")
    (root / "bin").write_bytes(b"ok \xff\xfe end")
    assert ok(ws.execute("read_file", {"path": "bin"})).content == "ok \ufffd\ufffd end"


def test_bad_calls_are_error_results(ws: Workspace) -> None:
    err(ws.execute("frobnicate", {}), "unknown tool")
    err(ws.execute("read_file", {}), "path")
    err(ws.execute("read_file", "{not json"), "JSON")
    err(ws.execute("read_file", "[1, 2]"), "object")
    err(ws.execute("write_file", {"path": "a.txt", "content": 5}), "content")
    err(ws.execute("write_file", {"path": "a.txt"}), "content")
    err(ws.execute("edit_file", {"path": "a.txt", "old_text": "x"}), "new_text")


def test_list_files(ws: Workspace, root: Path) -> None:
    for rel in ["b.txt", "a/z.txt", "a/b/c.txt", ".gitignore"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("x")
    (root / "sub").mkdir()
    (root / "sub" / ".git").write_text("gitdir: elsewhere")  # a worktree's .git file
    (root / "empty").mkdir()
    r = ok(ws.execute("list_files", {}))
    assert r.content.splitlines() == [".gitignore", "a/b/c.txt", "a/z.txt", "b.txt"]
    assert ok(ws.execute("list_files", {"path": "a"})).content.splitlines() == [
        "a/b/c.txt",
        "a/z.txt",
    ]
    assert "no files" in ok(ws.execute("list_files", {"path": "empty"})).content
    err(ws.execute("list_files", {"path": "missing"}), "does not exist")


@pytest.mark.slow
def test_list_files_cap(ws: Workspace, root: Path) -> None:
    for i in range(LIST_LIMIT + 5):
        (root / f"f{i:05d}").write_text("")
    lines = ok(ws.execute("list_files", {"path": "."})).content.splitlines()
    assert len(lines) == LIST_LIMIT + 1
    assert lines[0] == "f00000"
    assert "5 more" in lines[-1]


def test_edit_file(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "a.py").write_bytes(b"x = 1\r\ny = 2\r\n")
    r = ok(ws.execute("edit_file", {"path": "a.py", "old_text": "y = 2", "new_text": "y = 3"}))
    assert r.changed == ["a.py"] and calls == ["a.py"]
    assert (root / "a.py").read_bytes() == b"x = 1\r\ny = 3\r\n"


def test_edit_file_not_found_and_ambiguous(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "a.txt").write_text("foo foo bar\n")
    err(ws.execute("edit_file", {"path": "a.txt", "old_text": "foo", "new_text": "x"}), "2 times")
    err(ws.execute("edit_file", {"path": "a.txt", "old_text": "baz", "new_text": "x"}), "not found")
    err(ws.execute("edit_file", {"path": "b.txt", "old_text": "baz", "new_text": "x"}), "b.txt")
    assert (root / "a.txt").read_text() == "foo foo bar\n"
    assert calls == []


def test_edit_file_append(ws: Workspace, root: Path, calls: list[str]) -> None:
    # Empty old_text appends, creating the file (and its folders) when missing.
    ok(ws.execute("edit_file", {"path": "log/n.txt", "old_text": "", "new_text": "one\n"}))
    ok(ws.execute("edit_file", {"path": "log/n.txt", "old_text": "", "new_text": "two\n"}))
    assert (root / "log/n.txt").read_text() == "one\ntwo\n"
    assert calls == ["log/n.txt", "log/n.txt"]


def test_edit_file_keeps_invalid_bytes(ws: Workspace, root: Path) -> None:
    (root / "a.bin").write_bytes(b"\xff head\nmid\n")
    ok(ws.execute("edit_file", {"path": "a.bin", "old_text": "mid", "new_text": "MID"}))
    assert (root / "a.bin").read_bytes() == b"\xff head\nMID\n"


def test_delete_file(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "d").mkdir()
    (root / "d" / "a.txt").write_text("a")
    r = ok(ws.execute("delete_file", {"path": "d/a.txt"}))
    assert r.changed == ["d/a.txt"] and calls == ["d/a.txt"]
    assert not (root / "d" / "a.txt").exists()
    err(ws.execute("delete_file", {"path": "d/a.txt"}), "does not exist")
    err(ws.execute("delete_file", {"path": "d"}), "directory")
    assert (root / "d").is_dir()


def test_write_errors(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "d").mkdir()
    (root / "f").write_text("file")
    err(ws.execute("write_file", {"path": "d", "content": "x"}), "directory")
    err(ws.execute("write_file", {"path": "f/x.txt", "content": "x"}), "f", "not a folder")
    assert calls == []
    assert (root / "f").read_text() == "file"


def test_schemas() -> None:
    names = [t["function"]["name"] for t in Workspace.schemas(False)]
    assert names == [
        "read_file",
        "list_files",
        "write_file",
        "edit_file",
        "apply_patch",
        "delete_file",
    ]
    with_shell = Workspace.schemas(True)
    assert with_shell[-1]["function"]["name"] == "shell"
    for tool in with_shell:
        assert tool["type"] == "function"
        params = tool["function"]["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
    edit = next(t for t in with_shell if t["function"]["name"] == "edit_file")
    assert edit["function"]["parameters"]["required"] == ["path", "old_text", "new_text"]


# ------------------------------------------------------------------------------ before_write


def test_before_write_runs_first_and_failure_writes_nothing(root: Path) -> None:
    (root / "a.txt").write_text("old")
    seen: list[tuple[str, bool, str]] = []

    def hook(rel: str) -> None:
        # The file still holds its old content when the hook (the backup) runs.
        p = root / rel
        seen.append((rel, p.exists(), p.read_text() if p.exists() else ""))

    ws = Workspace(root, before_write=hook)
    ok(ws.execute("write_file", {"path": "a.txt", "content": "new"}))
    ok(ws.execute("write_file", {"path": "n/b.txt", "content": "b"}))
    ok(ws.execute("delete_file", {"path": "a.txt"}))
    assert seen == [("a.txt", True, "old"), ("n/b.txt", False, ""), ("a.txt", True, "new")]

    def failing(rel: str) -> None:
        raise RuntimeError(f"backup failed for {rel}")

    ws = Workspace(root, before_write=failing)
    (root / "c.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="backup failed for c.txt"):
        ws.execute("write_file", {"path": "c.txt", "content": "lost"})
    with pytest.raises(RuntimeError):
        ws.execute("edit_file", {"path": "c.txt", "old_text": "keep", "new_text": "x"})
    with pytest.raises(RuntimeError):
        ws.execute("edit_file", {"path": "c.txt", "old_text": "", "new_text": "x"})
    with pytest.raises(RuntimeError):
        ws.execute("delete_file", {"path": "c.txt"})
    with pytest.raises(RuntimeError):
        ws.execute("write_file", {"path": "new/d.txt", "content": "x"})
    patch = "--- a/c.txt\n+++ b/c.txt\n@@ -1 +1 @@\n-keep\n+gone\n"
    with pytest.raises(RuntimeError):
        ws.execute("apply_patch", {"patch": patch})
    assert (root / "c.txt").read_text() == "keep"
    assert not (root / "new").exists()


def test_before_write_oserror_propagates(root: Path) -> None:
    # An OSError from the hook is the hook's failure, not a tool error to hide from the caller.
    def failing(rel: str) -> None:
        raise PermissionError("backup store is read-only")

    ws = Workspace(root, before_write=failing)
    with pytest.raises(PermissionError):
        ws.execute("write_file", {"path": "a.txt", "content": "x"})
    assert not (root / "a.txt").exists()


def test_before_write_once_per_path_in_a_patch(ws: Workspace, root: Path, calls: list[str]):
    (root / "a.txt").write_text("1\n2\n3\n")
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-1\n+one\n"
        "--- a/a.txt\n+++ b/a.txt\n@@ -3 +3 @@\n-3\n+three\n"
        "--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+b\n"
    )
    r = ok(ws.execute("apply_patch", {"patch": patch}))
    assert calls == ["a.txt", "b.txt"]
    assert r.changed == ["a.txt", "b.txt"]
    assert (root / "a.txt").read_text() == "one\n2\nthree\n"


# ------------------------------------------------------------------------------- apply_patch


def test_patch_modify_multi_hunk(ws: Workspace, root: Path) -> None:
    (root / "m.txt").write_text("".join(f"line{i}\n" for i in range(1, 21)))
    patch = """diff --git a/m.txt b/m.txt
index 123..456 100644
--- a/m.txt
+++ b/m.txt
@@ -2,3 +2,3 @@
 line2
-line3
+LINE3
 line4
@@ -15,3 +15,4 @@ some function
 line15
 line16
+inserted
 line17
"""
    r = ok(ws.execute("apply_patch", {"patch": patch}))
    assert r.changed == ["m.txt"]
    lines = (root / "m.txt").read_text().splitlines()
    assert lines[2] == "LINE3"
    assert lines[15:18] == ["line16", "inserted", "line17"]
    assert len(lines) == 21


def test_patch_offset_fuzz(ws: Workspace, root: Path) -> None:
    # The stated line numbers are off by 3 (lines were added above): context still finds it.
    (root / "f.txt").write_text("new1\nnew2\nnew3\na\nb\nc\n")
    patch = "--- f.txt\n+++ f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    r = ok(ws.execute("apply_patch", {"patch": patch}))
    assert "offset +3" in r.content
    assert (root / "f.txt").read_text() == "new1\nnew2\nnew3\na\nB\nc\n"


def test_patch_bare_header_and_crlf(ws: Workspace, root: Path) -> None:
    (root / "w.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    patch = "--- a/w.txt\r\n+++ b/w.txt\r\n@@\r\n a\r\n-b\r\n+x\r\n+y\r\n c\r\n"
    ok(ws.execute("apply_patch", {"patch": patch}))
    assert (root / "w.txt").read_bytes() == b"a\r\nx\r\ny\r\nc\r\n"


def test_patch_create_and_delete(ws: Workspace, root: Path) -> None:
    (root / "old.txt").write_text("bye\nnow\n")
    patch = (
        "--- /dev/null\n+++ b/pkg/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
        "--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-bye\n-now\n"
    )
    r = ok(ws.execute("apply_patch", {"patch": patch}))
    assert r.changed == ["pkg/new.txt", "old.txt"]
    assert (root / "pkg/new.txt").read_text() == "hello\nworld\n"
    assert not (root / "old.txt").exists()


def test_patch_no_newline_at_eof(ws: Workspace, root: Path) -> None:
    (root / "n.txt").write_text("a\nb")
    patch = (
        "--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
        "+c\n\\ No newline at end of file\n"
    )
    ok(ws.execute("apply_patch", {"patch": patch}))
    assert (root / "n.txt").read_bytes() == b"a\nc"


def test_patch_failed_hunk_writes_nothing(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "a.txt").write_text("1\n2\n3\n")
    (root / "b.txt").write_text("x\ny\n")
    before = snapshot(root)
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n 1\n-2\n+two\n"
        "--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+c\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+X\n@@ -2 +2 @@\n-nope\n+Y\n"
    )
    r = err(ws.execute("apply_patch", {"patch": patch}), "hunk 2", "b.txt", "nothing was written")
    assert "nope" in r.content
    assert snapshot(root) == before
    assert calls == []


def test_patch_errors(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("a\n")
    err(ws.execute("apply_patch", {"patch": "just some text"}), "no file headers")
    err(ws.execute("apply_patch", {"patch": "@@ -1 +1 @@\n-a\n+b\n"}), "file header")
    create_existing = "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+b\n"
    err(ws.execute("apply_patch", {"patch": create_existing}), "already exists")
    modify_missing = "--- a/zz.txt\n+++ b/zz.txt\n@@ -1 +1 @@\n-a\n+b\n"
    err(ws.execute("apply_patch", {"patch": modify_missing}), "zz.txt", "does not exist")
    escape = "--- a/../x.txt\n+++ b/../x.txt\n@@ -1 +1 @@\n-a\n+b\n"
    err(ws.execute("apply_patch", {"patch": escape}), "outside")
    assert (root / "a.txt").read_text() == "a\n"


def test_patch_wrong_counts_and_trailing_blank_lines(ws: Workspace, root: Path) -> None:
    # Hand-written hunks: counts too small, and a blank separator before the next file.
    (root / "a.txt").write_text("1\n2\n3\n")
    (root / "b.txt").write_text("x\n")
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,1 @@\n 1\n-2\n+two\n 3\n\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+X\n\n"
    )
    ok(ws.execute("apply_patch", {"patch": patch}))
    assert (root / "a.txt").read_text() == "1\ntwo\n3\n"
    assert (root / "b.txt").read_text() == "X\n"


def test_patch_rename(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "a.txt").write_text("a\nb\n")
    patch = "--- a/a.txt\n+++ b/sub/c.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
    r = ok(ws.execute("apply_patch", {"patch": patch}))
    assert r.changed == calls == ["a.txt", "sub/c.txt"]
    assert not (root / "a.txt").exists()
    assert (root / "sub/c.txt").read_text() == "a\nB\n"


# ------------------------------------------------------------------------------- confinement

ESCAPES = ["../x", "/etc/x", "a/../../x", "../outside/secret.txt", "a/\x00b", "", "."]


@pytest.mark.parametrize("path", ESCAPES)
def test_escapes_write_nothing(
    ws: Workspace, root: Path, outside: Path, calls: list[str], path: str
) -> None:
    tmp = root.parent
    before_tmp = snapshot(tmp)
    results = [
        ws.execute("write_file", {"path": path, "content": "pwned"}),
        ws.execute("edit_file", {"path": path, "old_text": "", "new_text": "pwned"}),
        ws.execute("edit_file", {"path": path, "old_text": "secret", "new_text": "pwned"}),
        ws.execute("delete_file", {"path": path}),
        ws.execute("apply_patch", {"patch": f"--- /dev/null\n+++ {path}\n@@ -0,0 +1 @@\n+p\n"}),
    ]
    for r in results:
        err(r)
    assert snapshot(tmp) == before_tmp
    assert calls == []


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../outside/secret.txt"])
def test_escapes_for_reads(ws: Workspace, outside: Path, path: str) -> None:
    err(ws.execute("read_file", {"path": path}), "outside" if "/etc" not in path else "absolute")
    err(ws.execute("list_files", {"path": path}))


def test_resolve(ws: Workspace, root: Path) -> None:
    real_root = Path(os.path.realpath(root))
    assert ws.resolve("a/./b/../c.txt") == (real_root / "a/c.txt", "a/c.txt")
    assert ws.resolve(".") == (real_root, ".")
    for bad in ["../x", "/x", "a/../../x", ".git/config", "x/.GIT/y", "a\x00"]:
        with pytest.raises(PathEscape):
            ws.resolve(bad)


def test_symlink_dir_pointing_outside(
    ws: Workspace, root: Path, outside: Path, calls: list[str]
) -> None:
    (root / "link").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    err(ws.execute("read_file", {"path": "link/secret.txt"}), "outside")
    err(ws.execute("list_files", {"path": "link"}), "outside")
    err(ws.execute("write_file", {"path": "link/new.txt", "content": "x"}), "outside")
    err(ws.execute("write_file", {"path": "link/secret.txt", "content": "x"}), "outside")
    err(ws.execute("edit_file", {"path": "link/secret.txt", "old_text": "", "new_text": "x"}))
    err(ws.execute("delete_file", {"path": "link/secret.txt"}), "outside")
    patch = "--- a/link/secret.txt\n+++ b/link/secret.txt\n@@ -1 +1 @@\n-secret\n+x\n"
    err(ws.execute("apply_patch", {"patch": patch}), "outside")
    assert snapshot(outside) == before
    assert calls == []
    # Listing the root shows the link's name but never walks into it.
    assert "secret" not in ok(ws.execute("list_files", {})).content


def test_symlink_file_pointing_outside(
    ws: Workspace, root: Path, outside: Path, calls: list[str]
) -> None:
    (root / "s.txt").symlink_to(outside / "secret.txt")
    (root / "dangling.txt").symlink_to(outside / "created-through-link.txt")
    before = snapshot(outside)
    err(ws.execute("read_file", {"path": "s.txt"}), "outside")
    err(ws.execute("write_file", {"path": "s.txt", "content": "x"}), "outside")
    err(ws.execute("edit_file", {"path": "s.txt", "old_text": "secret", "new_text": "x"}))
    err(ws.execute("edit_file", {"path": "s.txt", "old_text": "", "new_text": "x"}))
    err(ws.execute("write_file", {"path": "dangling.txt", "content": "x"}), "outside")
    err(ws.execute("delete_file", {"path": "s.txt"}))
    assert snapshot(outside) == before
    assert (root / "s.txt").is_symlink()
    assert calls == []


def test_symlink_back_inside_via_outside_is_rejected(
    ws: Workspace, root: Path, outside: Path
) -> None:
    # out -> outside/, outside/back -> workdir/t.txt: the real target is inside, but the
    # path passes through a folder outside, so it is refused (deleting would unlink outside).
    (root / "t.txt").write_text("t")
    (root / "out").symlink_to(outside, target_is_directory=True)
    (outside / "back").symlink_to(root / "t.txt")
    err(ws.execute("delete_file", {"path": "out/back"}), "outside")
    err(ws.execute("read_file", {"path": "out/back"}), "outside")
    assert (outside / "back").is_symlink()


def test_symlinks_inside_root_are_fine(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("f\n")
    (root / "alias").symlink_to("real", target_is_directory=True)
    (root / "f-link").symlink_to("real/f.txt")
    assert ok(ws.execute("read_file", {"path": "alias/f.txt"})).content == "f\n"
    # Writing through a link changes the real file, and that is the path reported.
    r = ok(ws.execute("write_file", {"path": "f-link", "content": "g\n"}))
    assert r.changed == ["real/f.txt"] and calls == ["real/f.txt"]
    assert (root / "real/f.txt").read_text() == "g\n"
    assert (root / "f-link").is_symlink()
    # Deleting a link removes the link itself, not its target.
    r = ok(ws.execute("delete_file", {"path": "f-link"}))
    assert r.changed == ["f-link"]
    assert not (root / "f-link").exists() and (root / "real/f.txt").exists()


def test_git_paths_are_refused(ws: Workspace, root: Path, calls: list[str]) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    before = snapshot(root)
    err(ws.execute("read_file", {"path": ".git/config"}), ".git")
    err(ws.execute("write_file", {"path": ".git/config", "content": "x"}), ".git")
    err(ws.execute("write_file", {"path": "sub/.git/hooks/pre-commit", "content": "x"}), ".git")
    err(ws.execute("edit_file", {"path": ".git/config", "old_text": "", "new_text": "x"}))
    err(ws.execute("delete_file", {"path": ".git/config"}), ".git")
    err(ws.execute("list_files", {"path": ".git"}), ".git")
    patch = "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-[core]\n+x\n"
    err(ws.execute("apply_patch", {"patch": patch}), ".git")
    # A link inside the root that points at .git is refused too.
    (root / "g").symlink_to(".git", target_is_directory=True)
    err(ws.execute("write_file", {"path": "g/config", "content": "x"}), ".git")
    after = snapshot(root)
    del after["g"]
    assert after == before
    assert calls == []


def test_root_itself_cannot_be_written_or_deleted(ws: Workspace, root: Path) -> None:
    err(ws.execute("delete_file", {"path": "."}), "root")
    err(ws.execute("write_file", {"path": "a/..", "content": "x"}), "root")
    assert root.is_dir()


# ------------------------------------------------------------------------------------- shell


def test_shell_disabled(ws: Workspace, root: Path) -> None:
    r = err(ws.execute("shell", {"command": "touch made.txt"}), "shell tool is disabled")
    assert r.content == "error: shell tool is disabled"
    assert not (root / "made.txt").exists()


def test_shell_enabled(root: Path) -> None:
    ws = Workspace(root, shell_enabled=True)
    r = ok(ws.execute("shell", {"command": "pwd; echo out; echo err >&2; touch made.txt"}))
    assert r.content.startswith("exit code: 0\n")
    assert os.path.realpath(root) in r.content
    assert "out" in r.content and "err" in r.content
    assert (root / "made.txt").exists()
    assert r.changed == []  # the caller scans for shell changes
    r = ok(ws.execute("shell", {"command": "echo failing; exit 3"}))
    assert r.content.startswith("exit code: 3\n") and "failing" in r.content


def test_shell_output_is_capped(root: Path) -> None:
    ws = Workspace(root, shell_enabled=True)
    r = ok(ws.execute("shell", {"command": "head -c 1000000 /dev/zero | tr '\\0' a; echo END"}))
    assert len(r.content) < 25_000
    assert "omitted" in r.content
    assert r.content.rstrip().endswith("END")


def test_shell_timeout_kills_the_process_tree(root: Path) -> None:
    ws = Workspace(root, shell_enabled=True, shell_timeout=0.5)
    start = time.monotonic()
    # The background child keeps the output pipe open: it must be killed too, or this hangs.
    r = ws.execute("shell", {"command": "echo started; sleep 30 & sleep 30; touch late.txt"})
    assert time.monotonic() - start < 5
    err(r, "timed out")
    assert "started" in r.content
    time.sleep(0.2)
    assert not (root / "late.txt").exists()


BAD_NAMES = ["git~1/x", "GIT~1/x", ".git./x", ".gIt /x", ".GIT/config", "a/.Git/config",
             ".git::$INDEX_ALLOCATION/x", ".g\u200cit/x", "a\\.git/x", "a" * 256,
             "d/" + "é" * 128 + "/x", "bad\udcff.txt", "a\0b", "x/../.git ./y"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_every_door_refuses_a_name_git_cannot_hold(ws: Workspace, root: Path, calls: list[str],
                                                   name: str) -> None:
    """Issue 21 rows 5 and 15: the name rule (names.py) at the tools' door; nothing written,
    no backup taken, a result the model reads (never an exception)."""
    for tool, args in [
        ("write_file", {"path": name, "content": "x"}),
        ("edit_file", {"path": name, "old_text": "", "new_text": "x"}),
        ("read_file", {"path": name}),
        ("delete_file", {"path": name}),
        ("list_files", {"path": name}),
        ("apply_patch", {"patch": f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+x\n"}),
    ]:
        err(ws.execute(tool, args), "bad file name")
    assert calls == [] and list(root.iterdir()) == []


def test_list_files_shows_a_shell_made_name_escaped(ws: Workspace, root: Path) -> None:
    (root / os.fsdecode(b"bad\xff.txt")).write_text("x")
    r = ok(ws.execute("list_files", {"path": "."}))
    assert r.content == "bad\\xff.txt"
    r.content.encode("utf-8")  # goes into a JSON message as it is
