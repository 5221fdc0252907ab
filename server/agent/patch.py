"""A small unified-diff parser and applier for the agent's `apply_patch` tool.

Pure string functions, no file I/O: `server.agent.tools` reads the files, applies every hunk in
memory and writes only when all of them fit, which is what makes a patch all-or-nothing.

Models write diffs by hand, so the parser is lenient where it costs nothing: `a/`/`b/` prefixes
or plain paths, CRLF patches, a bare `@@` header without line numbers, hunk line counts that
are off. Matching stays exact on content; only the position may drift (offset fuzz).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEV_NULL = "/dev/null"

# The closing "@@" is optional: hand-written headers often omit it.
_HUNK_HEADER = re.compile(r"^@@+ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))?(?:\s|@|$)")


class PatchError(ValueError):
    """The patch is malformed or does not fit the files."""


@dataclass
class HunkLine:
    tag: str  # " " context, "-" removed, "+" added
    text: str  # without its line terminator
    no_eol: bool = False  # followed by "\ No newline at end of file"


@dataclass
class Hunk:
    header: str
    old_start: int | None  # None for a bare "@@" header: the position is searched for
    old_len: int | None
    lines: list[HunkLine] = field(default_factory=list)

    @property
    def old_texts(self) -> list[str]:
        return [ln.text for ln in self.lines if ln.tag != "+"]


@dataclass
class FilePatch:
    old_path: str | None  # None when the file is created (/dev/null)
    new_path: str | None  # None when the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path if self.new_path is not None else self.old_path or ""


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff into per-file patches, in order.

    Lines that are neither file headers nor hunks (``diff --git``, ``index``, prose) are
    skipped, as git and GNU patch do.
    """
    # A CRLF patch must still match an LF file, so one trailing "\r" per line is dropped here
    # and file lines are compared without their terminators too.
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if _is_file_header(lines, i):
            old_raw, new_raw = lines[i][4:], lines[i + 1][4:]
            i += 2
            old, new = _header_paths(old_raw, new_raw)
            if old is None and new is None:
                raise PatchError("a file header has /dev/null on both sides")
            fp = FilePatch(old, new)
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i)
                fp.hunks.append(hunk)
            if not fp.hunks and fp.old_path is not None and fp.old_path == fp.new_path:
                raise PatchError(f"no hunks for {fp.path}")
            patches.append(fp)
        elif lines[i].startswith("@@"):
            raise PatchError(f"hunk {lines[i]!r} comes before any '--- '/'+++ ' file header")
        else:
            i += 1
    if not patches:
        raise PatchError("no file headers ('--- path' then '+++ path') found in the patch")
    return patches


def _is_file_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _header_paths(old_raw: str, new_raw: str) -> tuple[str | None, str | None]:
    old, new = _clean_path(old_raw), _clean_path(new_raw)
    # Strip git's a/ and b/ only when both sides agree on the convention, so a plain path in a
    # folder named "a" survives ("--- a/x" / "+++ a/x" means the file a/x).
    old_git = old is None or old.startswith("a/")
    new_git = new is None or new.startswith("b/")
    if old_git and new_git:
        old = old[2:] if old is not None else None
        new = new[2:] if new is not None else None
    return old, new


def _clean_path(raw: str) -> str | None:
    # diff(1) appends "\t<timestamp>"; git quotes names with unusual characters.
    path = raw.split("\t", 1)[0].strip()
    if len(path) >= 2 and path.startswith('"') and path.endswith('"'):
        path = _unquote(path[1:-1])
    if path == DEV_NULL:
        return None
    if not path:
        raise PatchError("a file header has an empty path")
    return path


def _unquote(quoted: str) -> str:
    try:
        raw = quoted.encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeError, ValueError):
        return quoted


def _hunk_counts(header: str) -> tuple[int | None, int | None, int | None]:
    """(old start, old length, new length) of a hunk header; all None for a bare `@@`."""
    m = _HUNK_HEADER.match(header)
    if m:
        return (int(m.group(1)), int(m.group(2)) if m.group(2) is not None else 1,
                int(m.group(4)) if m.group(4) is not None else 1)
    if not header.startswith("@@ -"):
        # A bare "@@" (or "@@ some context @@"): no numbers, the context locates the hunk.
        return None, None, None
    raise PatchError(f"malformed hunk header {header!r}")


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    header = lines[i]
    old_start, old_len, new_len = _hunk_counts(header)
    hunk = Hunk(header=header.strip(), old_start=old_start, old_len=old_len)
    i += 1
    seen_old = seen_new = 0
    blank_tail = 0  # trailing raw-empty lines taken as empty context, maybe wrongly
    while i < len(lines):
        line = lines[i]
        counted_full = old_len is not None and seen_old >= old_len and seen_new >= (new_len or 0)
        if line.startswith("\\"):
            if hunk.lines:
                hunk.lines[-1].no_eol = True
            i += 1
            continue
        if line.startswith("@@") or line.startswith("diff --git "):
            break
        if _is_file_header(lines, i) and (old_len is None or counted_full):
            break
        if line == "":
            # Editors and models drop the single space of an empty context line.
            tag, text = " ", ""
            blank_tail += 1
        elif line[0] in " +-":
            tag, text = line[0], line[1:]
            blank_tail = 0
        else:
            break
        hunk.lines.append(HunkLine(tag, text))
        seen_old += tag != "+"
        seen_new += tag != "-"
        i += 1
    # The patch's final newline and blank separator lines look like empty context lines; drop
    # those past what the header counted (all of them when the header has no counts).
    while blank_tail and hunk.lines and hunk.lines[-1].tag == " " and hunk.lines[-1].text == "":
        if old_len is not None and seen_old <= old_len:
            break
        hunk.lines.pop()
        seen_old -= 1
        seen_new -= 1
        blank_tail -= 1
    if not hunk.lines:
        raise PatchError(f"hunk {hunk.header!r} has no lines")
    return hunk, i


def apply_hunks(content: str, hunks: list[Hunk], path: str) -> tuple[str, list[str]]:
    """Apply `hunks` to `content`; return the new content and notes about offsets used.

    Every hunk is located in the original text (in order, without overlaps), so a failure
    raises PatchError before anything is produced.
    """
    lines = _split_lines(content)
    eol = _default_eol(lines)
    texts = [t for t, _ in lines]
    notes: list[str] = []
    replacements: list[tuple[int, int, list[tuple[str, str]]]] = []
    floor = 0  # hunks apply in order: each starts at or after the end of the previous one
    drift = 0  # how far the previous hunk was from its stated line; later ones likely follow
    for number, hunk in enumerate(hunks, start=1):
        old = hunk.old_texts
        pos = _locate(texts, old, hunk, floor, drift)
        if pos is None:
            raise PatchError(_mismatch_message(path, number, hunk, old))
        stated = _stated_pos(hunk)
        if stated is not None and pos != stated:
            drift = pos - stated
            notes.append(f"hunk {number} of {path} applied at offset {drift:+d} lines")
        new: list[tuple[str, str]] = []
        k = pos
        for ln in hunk.lines:
            if ln.tag == " ":
                new.append(lines[k])
                k += 1
            elif ln.tag == "-":
                k += 1
            else:
                new.append((ln.text, "" if ln.no_eol else eol))
        replacements.append((pos, len(old), new))
        floor = pos + len(old)
    out: list[tuple[str, str]] = []
    cursor = 0
    for pos, n_old, new in replacements:
        out.extend(lines[cursor:pos])
        out.extend(new)
        cursor = pos + n_old
    out.extend(lines[cursor:])
    # A line that lost its newline by being last must regain it once something follows it.
    for j in range(len(out) - 1):
        if out[j][1] == "":
            out[j] = (out[j][0], eol)
    return "".join(t + e for t, e in out), notes


def _split_lines(content: str) -> list[tuple[str, str]]:
    """Split into (text, terminator) pairs; only "\\n" ends a line, "\\r\\n" is kept whole."""
    parts = content.split("\n")
    lines: list[tuple[str, str]] = []
    for part in parts[:-1]:
        if part.endswith("\r"):
            lines.append((part[:-1], "\r\n"))
        else:
            lines.append((part, "\n"))
    if parts[-1]:
        lines.append((parts[-1], ""))
    return lines


def _default_eol(lines: list[tuple[str, str]]) -> str:
    # Added lines follow the file's own convention so a CRLF file stays CRLF.
    for _, e in lines:
        if e:
            return e
    return "\n"


def _stated_pos(hunk: Hunk) -> int | None:
    if hunk.old_start is None:
        return None
    # "-5,0" means "insert after line 5"; "-5,3" means "lines 5..7", index 4.
    return hunk.old_start if hunk.old_len == 0 else max(hunk.old_start - 1, 0)


def _locate(texts: list[str], old: list[str], hunk: Hunk, floor: int, drift: int) -> int | None:
    last = len(texts) - len(old)
    if last < floor:
        return None
    stated = _stated_pos(hunk)
    if not old:
        # Pure insertion: nothing to match, so only the stated line (or the end) can be used.
        if stated is None:
            return len(texts)
        for pos in (stated + drift, stated):
            if floor <= pos <= len(texts):
                return pos
        return None
    expected = floor if stated is None else min(max(stated + drift, floor), last)
    # Nearest match to where the hunk says it belongs wins; ties go to the later position
    # only after the earlier one was tried.
    for distance in range(0, max(expected - floor, last - expected) + 1):
        for pos in (expected - distance, expected + distance):
            if floor <= pos <= last and texts[pos : pos + len(old)] == old:
                return pos
    return None


def _mismatch_message(path: str, number: int, hunk: Hunk, old: list[str]) -> str:
    shown = "\n".join("  | " + t for t in old[:8])
    more = f"\n  | ... ({len(old) - 8} more lines)" if len(old) > 8 else ""
    return (
        f"hunk {number} of {path} ({hunk.header}) does not match the file: "
        f"these lines were not found in order after the previous hunk:\n{shown}{more}"
    )
