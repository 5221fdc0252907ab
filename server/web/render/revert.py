"""HTML frames for reverting turns: the `reverted` event re-renders the turn's footer (chips,
badge, Revert/Redo) in every tab and appends the note; a `turn_diff` result fills the turn's
diff panel; a refused revert becomes a toast listing the files with a force button."""

from __future__ import annotations

from markupsafe import Markup, escape

from server.base.errors import ErrorInfo
from server.base.records import RewindPoint
from server.base.results import RevertResult, RunSummary, TranscriptItem, TurnDiff
from server.web.render.fragments import (
    ErrorRenderer,
    Renderer,
    ResultRenderer,
    View,
    instructions_chip,
)
from server.web.render.highlight import highlight_diff_line
from server.web.render.templating import dom_id, render

MAX_HIGHLIGHTED_LINES = 3000


def diff_lines(diff: str) -> list[tuple[str, Markup]]:
    """(css class, html) for each line of a unified diff; the code of added, removed and
    context lines is highlighted as its file's language. `index <hash>..<hash>` lines are
    left out: they name blobs, not anything a reader knows."""
    out: list[tuple[str, Markup]] = []
    path: str | None = None
    for n, line in enumerate(diff.splitlines()):
        if line.startswith("index "):
            continue
        if line.startswith(("diff --git", "--- ", "+++ ", "new file", "deleted file",
                            "old mode", "new mode", "Binary files")):
            if line.startswith("+++ ") or line.startswith("--- "):
                name = line[4:].strip()
                if name != "/dev/null":
                    path = name[2:] if name[:2] in ("a/", "b/") else name
            out.append(("meta", Markup(escape(line))))
            continue
        if line.startswith("@@"):
            out.append(("hunk", Markup(escape(line))))
            continue
        kind = {"+": "add", "-": "del"}.get(line[:1], "ctx")
        code = line[1:]
        html = highlight_diff_line(path, code) if n < MAX_HIGHLIGHTED_LINES \
            else Markup(escape(code))
        out.append((kind, Markup(escape(line[:1])) + html))
    return out


def footer(turn: TranscriptItem) -> str:
    """The footer's inner HTML swapped into `#footer-<run>`, from the same partial the page
    renders, so a live update and a reload show the same thing."""
    run = turn.get("run") or {}
    rid = dom_id(turn["run_id"])
    inner = render("_turn_footer.html", turn=turn, run=run, status=run.get("status") or "",
                   rid=rid)
    return f'<div hx-swap-oob="innerHTML:#footer-{rid}" data-turn-part>{inner}</div>'


def rewind_menu(point: RewindPoint, rewound: str | None) -> str:
    """A user bubble's Rewind menu (`#rewind-<message id>`) swapped in place: with "Files
    rewound here · Undo rewind" after a files-only rewind to it, without after its undo."""
    msg = {"id": point.get("message_id")}
    inner = render("_rewind_menu.html", msg=msg, index=point["message_index"],
                   rewound=rewound)
    return inner.replace(' id="rewind-', ' hx-swap-oob="true" id="rewind-', 1)


def _rewound(v: View, point: RewindPoint) -> str:
    data = v.data
    html = rewind_menu(point, data["run_id"] if data.get("reverted") else None) \
        if point.get("message_id") else ""
    if data.get("note"):
        note = render("_note.html", item={"message": data["note"]})
        html += f'<div id="transcript" hx-swap-oob="beforeend">{note}</div>'
    return html


def reverted(v: View) -> str:
    data = v.data
    if data.get("rewind"):
        return _rewound(v, data["rewind"]) + instructions_chip(v)
    turn: TranscriptItem = {"type": "turn", "run_id": data["run_id"],
                            "run": data.get("run") or RunSummary(),
                            "files": data.get("files") or []}
    html = footer(turn) + instructions_chip(v)  # the turn may have written AGENTS.md
    if data.get("note"):
        note = render("_note.html", item={"message": data["note"]})
        html += f'<div id="transcript" hx-swap-oob="beforeend">{note}</div>'
    return html


async def _turn_diff(r: Renderer, data: TurnDiff) -> str:
    return render("_diff.html", rid=dom_id(data["turn_id"]), path=data.get("path"),
                  lines=diff_lines(data.get("diff") or ""), paths=data.get("paths") or [])


async def _reverted_result(r: Renderer, data: RevertResult) -> str:
    paths = data.get("restored_paths") or []
    names = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
    if data.get("rewind"):
        verb = "Files rewound" if data.get("reverted") else "Rewind undone"
        text = f"{verb}: {names}" if paths else f"{verb} (no file needed changing)"
    elif data.get("reverted"):
        text = f"Reverted: {names}" if paths else "Reverted (no file needed changing)"
    else:
        text = f"Redone: {names}" if paths else "Redone (no file needed changing)"
    return r.toast(text, level="info")


def _refused(action: str) -> ErrorRenderer:
    async def render_error(r: Renderer, error: ErrorInfo) -> str:
        details = error.get("details") or {}
        conflicts = details.get("conflicts") or []
        turn_id = details.get("turn_id")
        if error.get("code") != "conflict" or not conflicts or not turn_id:
            return r.toast(error.get("message") or "Failed")
        undo = action == "revert_turn"
        # The toast's button sends the same action again, forced (static/revert.js: through
        # the page's #act-form, the toast being outside the socket's element).
        force: dict[str, object] = {"action": action, "turn_id": turn_id, "force": True}
        if details.get("paths"):  # one chip's own Revert/Redo: that file only
            force["paths"] = details["paths"]
        toast = render(
            "_revert_conflict.html", conflicts=conflicts, message=error.get("message"),
            title="Can't revert cleanly" if undo else "Can't redo cleanly",
            force=force,
            force_label="Revert anyway" if undo else "Redo anyway",
        )
        return f'<div id="toasts" hx-swap-oob="beforeend">{toast}</div>'

    return render_error


REVERT_RESULTS: dict[str, ResultRenderer] = {
    "turn_diff": _turn_diff,
    "revert_turn": _reverted_result,
    "unrevert_turn": _reverted_result,
    "rewind_files": _reverted_result,
}
# Error renderers take the frame's `error` object: {code, message, details?}.
REVERT_ERRORS: dict[str, ErrorRenderer] = {
    "revert_turn": _refused("revert_turn"),
    "unrevert_turn": _refused("unrevert_turn"),
}
