"""The page's side of import/export: the "New session from…" form route and the HTML frames
for `export_session` / `update_from_source` results and errors (the `#export-result`
partial, in every case the same one the page includes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.base.errors import BraidError, ErrorInfo
from server.base.results import BranchExport, FolderExport, SyncResult
from server.features import sessions
from server.features.sources.sources import SourceRequest
from server.web import params
from server.web.auth import origin_allowed, user_of
from server.web.render.fragments import ErrorRenderer, Renderer, ResultRenderer
from server.web.render.templating import render


def source_of(form: dict[str, str]) -> SourceRequest | None:
    where = form.get("where", "").strip()
    ref = form.get("ref", "").strip()
    if form.get("kind") == "git":
        return params.source({"git": where, **({"ref": ref} if ref else {})})
    return params.source({"path": where})


async def new_from(request: Request) -> Response:
    """POST /sessions/import: a session from a folder or a git repository. htmx gets the
    form back with the error, or an HX-Redirect to the new session."""
    user_id = user_of(request)
    if not origin_allowed(request):
        return HTMLResponse("cross-site form refused", status_code=403)
    raw = await request.form()
    form = {k: str(raw.get(k) or "") for k in ("kind", "where", "ref")}
    htmx = request.headers.get("hx-request") == "true"
    try:
        created = await sessions.create_session(request.app.state.braid, user_id, "",
                                                source_of(form))
    except BraidError as e:
        html = render("_new_from.html", form=form, error=e.message)
        return HTMLResponse(html, status_code=200 if htmx else 400)
    url = f"/s/{created['session_id']}"
    if htmx:
        return HTMLResponse("", headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


# What stands in the folder where the session's file must go (`theirs` of a conflict), and
# what the session did to it (`ours`), in plain words for the page.
THEIRS = {
    "folder": "a folder is there",
    "file": "a file stands where its folder must go",
    "symlink": "a symlink stands where its folder must go",
    "other": "something that is not a file (a pipe, a device…) is in the way",
    "modified": "changed there since",
    "deleted": "deleted there since",
}
OURS = {"added": "added in this session", "modified": "changed in this session",
        "deleted": "deleted in this session"}


def _conflicts(items: Any) -> list[dict[str, str]]:
    """`[{path, ours, theirs}]` as words; anything not shaped so is left out (the page
    shows what it can; every string is escaped by the template)."""
    if not isinstance(items, list):
        return []
    return [{"path": c["path"], "ours": _word(OURS, c.get("ours")),
             "theirs": _word(THEIRS, c.get("theirs"))}
            for c in items if isinstance(c, dict) and isinstance(c.get("path"), str)]


def _word(words: dict[str, str], value: Any) -> str:
    return words.get(value, value) if isinstance(value, str) else ""


def _skipped(items: Any) -> list[dict[str, str]]:
    if not isinstance(items, list):
        return []
    return [{"path": s["path"], "reason": str(s.get("reason", ""))}
            for s in items if isinstance(s, dict) and isinstance(s.get("path"), str)]


def _result(result: Mapping[str, object]) -> str:  # the template's `result`
    return render("_export_result.html", result=result)


def exported_html(data: FolderExport | BranchExport) -> str:
    if "branch" in data:
        return _result({**data, "kind": "branch"})
    return _result({**data, "kind": "folder", "conflicts": _conflicts(data.get("conflicts")),
                    "skipped": _skipped(data.get("skipped"))})


def failed_html(error: ErrorInfo) -> str:
    """An error frame: its message, and for a clash (`conflict` with `details.conflicts`)
    each path and what is in its way: nothing was written (all or nothing)."""
    given = error.get("details")
    details = given if isinstance(given, dict) else {}
    clashes = _conflicts(details.get("conflicts")) if error.get("code") == "conflict" else []
    return _result({"error": error.get("message") or "failed", "clashes": clashes})


async def _exported(r: Renderer, data: FolderExport | BranchExport) -> str:
    return exported_html(data)


async def _updated(r: Renderer, data: SyncResult) -> str:
    return _result({**data, "kind": "update"})


async def _failed(r: Renderer, error: ErrorInfo) -> str:
    return failed_html(error)


IMPORT_RESULTS: dict[str, ResultRenderer] = {"export_session": _exported,
                                             "update_from_source": _updated}
IMPORT_ERRORS: dict[str, ErrorRenderer] = {"export_session": _failed,
                                           "update_from_source": _failed}
