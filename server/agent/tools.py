"""The agent's file tools, confined to one session's `workdir/`.

`Workspace.execute` is the single entry point: it never raises for a bad call from the model
(unknown tool, bad arguments, a path leading outside, a missing file); those come back as an
error `ToolResult` the model can read and correct. The one exception is `before_write`: it is
how per-turn backups hook in, and a failed backup must stop the turn, not just the tool call.

Paths are resolved through their real location (symlinks inside the workdir are followed), so
`changed` names the file whose content actually changed, which is what a checkpoint must
rehash; without symlinks it is simply the normalized path the model gave.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.agent.patch import PatchError, apply_hunks, parse_patch
from server.agent.shell import run_shell
from server.agent.tool_paths import PathEscape, blocking_parent, resolve_in, write_bytes
from server.base.names import shown
from server.base.records import ToolSchema

LIST_LIMIT = 2000


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    changed: list[str] = field(default_factory=list)


def _error(message: str) -> ToolResult:
    return ToolResult(content=f"error: {message}", is_error=True, changed=[])


class _HookFailed(Exception):
    """Carries an exception from `before_write` past the tool-level error handling."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


@dataclass
class _Spec:
    description: str
    params: dict[str, str]  # name -> description; all strings
    required: tuple[str, ...]


_TOOLS: dict[str, _Spec] = {
    "read_file": _Spec(
        "Read a text file from the workspace.",
        {"path": "File path relative to the workspace root."},
        ("path",),
    ),
    "list_files": _Spec(
        "List files under a folder of the workspace, recursively, one path per line.",
        {"path": "Folder relative to the workspace root (default: the root)."},
        (),
    ),
    "write_file": _Spec(
        "Create or overwrite a file with exactly the given content; creates parent folders.",
        {"path": "File path relative to the workspace root.", "content": "The full content."},
        ("path", "content"),
    ),
    "edit_file": _Spec(
        "Replace the single exact occurrence of old_text with new_text in a file. "
        "With an empty old_text, append new_text to the end of the file (creating it).",
        {
            "path": "File path relative to the workspace root.",
            "old_text": "Exact text to replace; must occur exactly once. Empty to append.",
            "new_text": "Replacement text.",
        },
        ("path", "old_text", "new_text"),
    ),
    "apply_patch": _Spec(
        "Apply a unified diff (--- a/path, +++ b/path, @@ hunks; /dev/null to create or "
        "delete) to one or more files. All hunks apply or nothing is written.",
        {"patch": "The unified diff text."},
        ("patch",),
    ),
    "delete_file": _Spec(
        "Delete a file from the workspace.",
        {"path": "File path relative to the workspace root."},
        ("path",),
    ),
    "shell": _Spec(
        "Run a bash command in the workspace root and return its exit code and output.",
        {"command": "The bash command line."},
        ("command",),
    ),
}


def _checked_args(name: str, args: dict[str, Any] | str) -> dict[str, Any] | ToolResult:
    """The call's arguments as a dict of strings, or the error the model reads."""
    if name not in _TOOLS:
        return _error(f"unknown tool {name!r}; available: {', '.join(_TOOLS)}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return _error(f"arguments for {name} are not valid JSON: {exc}")
    if not isinstance(args, dict):
        return _error(f"arguments for {name} must be a JSON object")
    spec = _TOOLS[name]
    for key in spec.required:
        if key not in args:
            return _error(f"{name} needs the argument {key!r}")
    for key in spec.params:
        if key in args and not isinstance(args[key], str):
            return _error(f"argument {key!r} of {name} must be a string")
    return args


class Workspace:
    def __init__(
        self,
        root: Path,
        *,
        before_write: Callable[[str], None] | None = None,
        shell_enabled: bool = False,
        shell_timeout: float = 30.0,
        shell_runner: Callable[[str, Path], tuple[str, bool]] | None = None,
    ) -> None:
        self.root = Path(root)
        self.before_write = before_write
        self.shell_enabled = shell_enabled
        self.shell_timeout = shell_timeout
        # How a command runs (agent/turn_tools.py: the sandbox, or the host when the operator
        # chose it); without one (a test of the tools), on the host.
        self.shell_runner = shell_runner

    # ----------------------------------------------------------------- confinement

    def resolve(self, path: str) -> tuple[Path, str]:
        """Return (absolute real path, workdir-relative POSIX path), or raise PathEscape."""
        return self._resolve(path, follow_final=True)

    def resolve_for_write(self, path: str) -> tuple[Path, str]:
        """`resolve`, refusing the workspace root itself."""
        return self._resolve(path, follow_final=True, allow_root=False)

    def _resolve(
        self, path: str, *, follow_final: bool, allow_root: bool = True
    ) -> tuple[Path, str]:
        return resolve_in(self.root, path, follow_final=follow_final, allow_root=allow_root)

    # --------------------------------------------------------------------- dispatch

    def execute(self, name: str, args: dict[str, Any] | str) -> ToolResult:
        """Run one tool call; every failure except one from `before_write` is a result."""
        checked = _checked_args(name, args)
        if isinstance(checked, ToolResult):
            return checked
        spec = _TOOLS[name]
        try:
            result: ToolResult = getattr(self, f"_tool_{name}")(
                **{k: checked[k] for k in spec.params if k in checked})
            return result
        except _HookFailed as exc:
            # Re-raised as is (keeping its own cause) so the caller sees the backup failure.
            raise exc.original from exc.original.__cause__
        except PathEscape as exc:
            return _error(str(exc))
        except IsADirectoryError as exc:
            return _error(f"{_name(exc)} is a directory")
        except NotADirectoryError as exc:
            return _error(f"a parent of {_name(exc)} is a file, not a folder")
        except FileNotFoundError as exc:
            return _error(f"{_name(exc)} does not exist")
        except OSError as exc:
            return _error(f"{name} failed: {exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 - the model must get a result, not a crash
            return _error(f"{name} failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def schemas(shell_enabled: bool) -> list[ToolSchema]:
        """The OpenAI Chat Completions `tools` list for these tools."""
        out: list[ToolSchema] = []
        for name, spec in _TOOLS.items():
            if name == "shell" and not shell_enabled:
                continue
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": spec.description,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                k: {"type": "string", "description": d}
                                for k, d in spec.params.items()
                            },
                            "required": list(spec.required),
                            "additionalProperties": False,
                        },
                    },
                }
            )
        return out

    def _notify(self, rel: str) -> None:
        if self.before_write is None:
            return
        try:
            self.before_write(rel)
        except Exception as exc:
            raise _HookFailed(exc) from exc

    # ------------------------------------------------------------------------ tools

    def _tool_read_file(self, path: str) -> ToolResult:
        abs_path, rel = self._resolve(path, follow_final=True)
        if abs_path.is_dir():
            return _error(f"{rel} is a directory; use list_files")
        if not abs_path.exists():
            return _error(f"{rel} does not exist")
        return ToolResult(abs_path.read_bytes().decode("utf-8", errors="replace"))

    def _tool_list_files(self, path: str = ".") -> ToolResult:
        abs_path, rel = self._resolve(path or ".", follow_final=True)
        if not abs_path.exists():
            return _error(f"{rel} does not exist")
        root_real = os.path.realpath(self.root)
        if not abs_path.is_dir():
            return ToolResult(rel)
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(abs_path):
            dirnames[:] = [d for d in dirnames if d.casefold() != ".git"]
            for fname in filenames:
                if fname.casefold() == ".git":
                    continue
                full = os.path.join(dirpath, fname)
                # Escaped: a name that is not UTF-8 (made by the shell) cannot go into JSON.
                found.append(shown(os.path.relpath(full, root_real).replace(os.sep, "/")))
        if not found:
            return ToolResult(f"(no files under {rel})")
        found.sort()
        lines = found[:LIST_LIMIT]
        if len(found) > LIST_LIMIT:
            lines.append(f"... ({len(found) - LIST_LIMIT} more files not shown)")
        return ToolResult("\n".join(lines))

    def _tool_write_file(self, path: str, content: str) -> ToolResult:
        abs_path, rel = self._resolve(path, follow_final=True, allow_root=False)
        data = content.encode("utf-8")  # before the hook: bad content changes nothing
        if abs_path.is_dir():
            return _error(f"{rel} is a directory")
        if blocked := blocking_parent(self.root, abs_path):
            return _error(f"cannot create {rel}: {blocked} is a file, not a folder")
        existed = abs_path.exists()
        self._notify(rel)
        write_bytes(self.root, abs_path, data)
        verb = "overwrote" if existed else "created"
        return ToolResult(f"{verb} {rel} ({len(data)} bytes)", changed=[rel])

    def _tool_edit_file(self, path: str, old_text: str, new_text: str) -> ToolResult:
        abs_path, rel = self._resolve(path, follow_final=True, allow_root=False)
        if abs_path.is_dir():
            return _error(f"{rel} is a directory")
        if old_text == "":
            if blocked := blocking_parent(self.root, abs_path):
                return _error(f"cannot create {rel}: {blocked} is a file, not a folder")
            data = new_text.encode("utf-8")
            self._notify(rel)
            write_bytes(self.root, abs_path, data, append=True)
            return ToolResult(f"appended {len(data)} bytes to {rel}", changed=[rel])
        if not abs_path.exists():
            return _error(f"{rel} does not exist")
        # surrogateescape keeps bytes that are not UTF-8 intact through the round trip.
        text = abs_path.read_bytes().decode("utf-8", errors="surrogateescape")
        count = text.count(old_text)
        if count == 0:
            return _error(f"old_text was not found in {rel}; nothing was changed")
        if count > 1:
            return _error(
                f"old_text occurs {count} times in {rel}; include more surrounding text so it "
                "occurs exactly once; nothing was changed"
            )
        data = text.replace(old_text, new_text, 1).encode("utf-8", errors="surrogateescape")
        self._notify(rel)
        write_bytes(self.root, abs_path, data)
        return ToolResult(f"edited {rel}", changed=[rel])

    def _tool_delete_file(self, path: str) -> ToolResult:
        abs_path, rel = self._resolve(path, follow_final=False, allow_root=False)
        try:
            st = abs_path.lstat()
        except FileNotFoundError:
            return _error(f"{rel} does not exist")
        if stat.S_ISDIR(st.st_mode):
            return _error(f"{rel} is a directory; only files can be deleted")
        self._notify(rel)
        abs_path.unlink()
        return ToolResult(f"deleted {rel}", changed=[rel])

    def _tool_apply_patch(self, patch: str) -> ToolResult:
        try:
            file_patches = parse_patch(patch)
        except PatchError as exc:
            return _error(f"could not parse the patch: {exc}; nothing was written")
        # Everything is computed in memory first; the disk is touched only once every hunk
        # of every file has matched.
        plan = _PatchPlan(self)
        try:
            for fp in file_patches:
                plan.add(fp)
        except PatchError as exc:
            return _error(f"patch failed: {exc}; nothing was written")
        changed = [rel for rel in plan.state if plan.state[rel] is not None or plan.existed[rel]]
        for rel in changed:
            self._notify(rel)
        summary: list[str] = []
        for rel in changed:
            new = plan.state[rel]
            if new is None:
                plan.paths[rel].unlink()
                summary.append(f"deleted {rel}")
            else:
                data = new.encode("utf-8", errors="surrogateescape")
                write_bytes(self.root, plan.paths[rel], data)
                summary.append(f"{'modified' if plan.existed[rel] else 'created'} {rel}")
        text = "applied patch: " + ", ".join(summary) if summary else "patch changed nothing"
        if plan.notes:
            text += "\n" + "\n".join(plan.notes)
        return ToolResult(text, changed=changed)

    def _tool_shell(self, command: str) -> ToolResult:
        if not self.shell_enabled:
            return _error("shell tool is disabled")
        if self.shell_runner is not None:
            text, failed = self.shell_runner(command, self.root)
        else:
            text, failed = run_shell(command, cwd=self.root, timeout=self.shell_timeout)
        return ToolResult(text, is_error=failed)

def _name(exc: OSError) -> str:
    return str(exc.filename) if exc.filename else "the path"


class _PatchPlan:
    """A patch applied in memory: each file's new text (None: deleted), nothing on disk."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.state: dict[str, str | None] = {}
        self.paths: dict[str, Path] = {}
        self.existed: dict[str, bool] = {}
        self.notes: list[str] = []

    def current(self, rel: str, abs_path: Path) -> str | None:
        if rel not in self.state:
            self.paths[rel] = abs_path
            if abs_path.is_dir():
                raise PatchError(f"{rel} is a directory")
            exists = abs_path.exists()
            self.existed[rel] = exists
            raw = abs_path.read_bytes() if exists else None
            self.state[rel] = raw.decode("utf-8", "surrogateescape") if raw is not None else None
        return self.state[rel]

    def add(self, fp: Any) -> None:
        ws = self.workspace
        src = fp.old_path if fp.old_path is not None else fp.new_path
        assert src is not None
        abs_src, rel_src = ws.resolve_for_write(src)
        text = self.current(rel_src, abs_src)
        if fp.old_path is None and text is not None:
            raise PatchError(f"{rel_src} already exists, but the patch creates it")
        if fp.old_path is not None and text is None:
            raise PatchError(f"{rel_src} does not exist")
        new_text, hunk_notes = apply_hunks(text or "", fp.hunks, rel_src)
        self.notes.extend(hunk_notes)
        if fp.new_path is None:
            if new_text != "":
                raise PatchError(
                    f"the patch deletes {rel_src} but does not remove all of its lines")
            self.state[rel_src] = None
            return
        abs_dst, rel_dst = ws.resolve_for_write(fp.new_path)
        if rel_dst != rel_src:
            # A rename: the old name goes away, the new one must be free.
            if self.current(rel_dst, abs_dst) is not None:
                raise PatchError(f"{rel_dst} already exists, but the patch renames to it")
            self.state[rel_src] = None
        if blocked := blocking_parent(ws.root, abs_dst):
            raise PatchError(f"cannot create {rel_dst}: {blocked} is a file")
        self.state[rel_dst] = new_text
