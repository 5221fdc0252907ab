"""Domain error codes mapped once to HTTP statuses and error bodies."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.errors import BraidError

HTTP_STATUS = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "busy": 409,
    "internal": 500,
}


def error_body(error: BraidError) -> dict[str, Any]:
    return {"error": error.as_dict()}


STATUS_CODE = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "bad_request", 409: "conflict", 413: "bad_request"}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no route: `..%2F` paths too; wrong method) in the JSON shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code < 400:
        return Response(status_code=exc.status_code, headers=exc.headers)
    code = STATUS_CODE.get(exc.status_code, "internal" if exc.status_code >= 500
                           else "bad_request")
    return JSONResponse({"error": {"code": code, "message": str(exc.detail)}},
                        status_code=exc.status_code, headers=exc.headers)


async def server_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": {"code": "internal",
                                   "message": f"internal error: {type(exc).__name__}"}},
                        status_code=500)


def error_response(error: BraidError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=HTTP_STATUS.get(error.code, 500))
