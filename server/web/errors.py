"""Domain error codes mapped once to HTTP statuses and error bodies."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

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


def error_response(error: BraidError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=HTTP_STATUS.get(error.code, 500))
