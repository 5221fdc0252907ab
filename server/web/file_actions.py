"""The file panel's web side (DESIGN §5): the HTTP answers of `GET
/api/sessions/{id}/files?ref=&path=` (a folder's entries as JSON, or a file's bytes) and
`GET /api/sessions/{id}/workdir.zip?ref=` (declared in actions.py with `list_files`), uploads
(`POST /api/sessions/{id}/files`, multipart), and the panel's HTML partials."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from server.base.errors import BadRequest, BraidError, Forbidden
from server.features import files, uploads
from server.web import params
from server.web.auth import origin_allowed, user_of
from server.web.render.highlight import as_text, highlight_lines
from server.web.render.names import load_names
from server.web.render.templating import render

FILE_VIEW_LIMIT = 2_000_000  # bytes shown in the panel; bigger files are download-only


def _attachment(name: str) -> str:
    ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "file"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"


def file_or_folder(got: files.PathRead, status: int) -> Response:
    """`GET /api/sessions/{id}/files`: a folder's entries (JSON), or a file's bytes, as a
    download that never runs as a page of this site (an uploaded .html or .js stays inert)."""
    if got["type"] == "dir":
        return JSONResponse({k: got[k] for k in ("ref", "commit_id", "path", "entries")})
    name = got["path"].rsplit("/", 1)[-1]
    headers = {"content-disposition": _attachment(name),
               "content-security-policy": "sandbox; default-src 'none'",
               "x-braid-commit": got["commit_id"]}
    if got["data"] is None:  # a big file: streamed
        return StreamingResponse(got["stream"].chunks(), media_type="application/octet-stream",
                                 headers={**headers, "content-length": str(got["size"])})
    return Response(got["data"], media_type="application/octet-stream", headers=headers)


def zip_download(got: files.RepoStream, status: int) -> Response:
    """`GET /api/sessions/{id}/workdir.zip`: the workdir at a ref, as a download made while
    it is sent."""
    return StreamingResponse(got.chunks(), media_type="application/zip",
                             headers={"content-disposition": _attachment(got.name)})


async def _body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            if chunk:
                yield chunk
    except ClientDisconnect as e:
        raise BadRequest("the client went away during the upload") from e


async def api_upload(request: Request) -> Response:
    """`POST /api/sessions/{id}/files` (multipart, streamed): only a caller with a valid
    token gets here; a browser's upload must come from this origin even with a
    Bearer."""
    user_id = user_of(request)
    if not origin_allowed(request):
        raise Forbidden("cross-site upload refused")
    made = await uploads.upload(request.app.state.braid, user_id,
                                request.path_params["session_id"], _body(request),
                                request.headers.get("content-type", ""))
    return JSONResponse(made, status_code=201)


# -- the panel's partials -----------------------------------------------------------------


def _crumbs(path: str) -> list[dict[str, str]]:
    out = [{"name": "workdir", "path": ""}]
    acc = ""
    for part in [p for p in path.split("/") if p]:
        acc = f"{acc}/{part}" if acc else part
        out.append({"name": part, "path": acc})
    return out


def _partial_error(e: BraidError) -> HTMLResponse:
    html = render("_toast.html", message=e.message, level="error")
    return HTMLResponse(f'<div id="toasts" hx-swap-oob="beforeend">{html}</div>',
                        status_code=200)


async def _panel_get(request: Request, getter: Any, want_file: bool = False) -> Any:
    """The panel partials' shared part: the user, then `getter` (files.list_files or
    files.get_path) at the query's `ref` and `path`; a Response to return as it is on error."""
    user_id = user_of(request)
    try:
        got = await getter(request.app.state.braid, user_id, request.path_params["session_id"],
                           params.ref(request.query_params.get("ref")),
                           params.workdir_path(request.query_params.get("path")))
        if want_file and got["type"] != "file":
            raise BadRequest(f"{got['path']} is a folder")
    except BraidError as e:
        return _partial_error(e)
    return got


async def files_fragment(request: Request) -> Response:
    """The panel: the folder at `path` of the workdir at `ref`, with its breadcrumbs."""
    got = await _panel_get(request, files.list_files)
    if isinstance(got, Response):
        return got
    sid = request.path_params["session_id"]
    await load_names(request.app.state.braid, sid)
    at_commit = got["ref"] == got["commit_id"]
    return HTMLResponse(render("_files.html", listing=got, session_id=sid,
                               crumbs=_crumbs(got["path"]), at_commit=at_commit,
                               ref_param=got["commit_id"] if at_commit else got["ref"],
                               ref_label=request.query_params.get("label") or ""))


async def file_view(request: Request) -> Response:
    """One whole file, highlighted on the server, with its line numbers."""
    got = await _panel_get(request, files.get_path, want_file=True)
    if isinstance(got, Response):
        return got
    sid = request.path_params["session_id"]
    text = as_text(got["data"]) if got["data"] is not None and got["size"] <= FILE_VIEW_LIMIT \
        else None
    lines = highlight_lines(got["path"], text) if text is not None else None
    at_commit = got["ref"] == got["commit_id"]
    return HTMLResponse(render("_file_view.html", file=got, lines=lines, session_id=sid,
                               ref_param=got["commit_id"] if at_commit else got["ref"]))
