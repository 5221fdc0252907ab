"""Domain errors mapped once: each error class to its HTTP status, its JSON body and its socket
error frame. The app installs `braid_error` as the handler of every `BraidError`; the socket
builds its error frames with `error_frame`; anything else is `internal`."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from server.base.errors import (
    BadRequest,
    BraidError,
    Busy,
    Conflict,
    ErrorInfo,
    Forbidden,
    NotFound,
    TooLarge,
    TooMany,
    Unauthorized,
)
from server.base.results import EventFrame

STATUS: dict[type[BraidError], int] = {
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Busy: 409,
    TooLarge: 413,
    TooMany: 429,
}


def status_of(error: BraidError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def as_braid_error(error: BaseException) -> BraidError:
    """A domain error as it is; any other is `internal`, named by its type only."""
    if isinstance(error, BraidError):
        return error
    return BraidError(f"internal error: {type(error).__name__}")


class ErrorBody(TypedDict):
    error: ErrorInfo


class ResultFrame(TypedDict):
    """An action's answer on the socket."""

    type: Literal["result"]
    action: str
    request_id: Any  # the client's own, echoed as it sent it
    data: Any  # the action's result: its type is the one its action returns


class ErrorFrame(TypedDict):
    """An action's refusal on the socket (`action` None: no action was read)."""

    type: Literal["error"]
    action: str | None
    request_id: Any
    error: ErrorInfo


# What a socket sends: an event of its session, or an answer to one of its actions.
Frame = EventFrame | ResultFrame | ErrorFrame


def error_body(error: BraidError) -> ErrorBody:
    return {"error": error.as_dict()}


def error_response(error: BraidError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=status_of(error))


def error_frame(action: Any, request_id: Any, error: BaseException) -> ErrorFrame:
    return {"type": "error", "action": action, "request_id": request_id,
            "error": as_braid_error(error).as_dict()}


def result_frame(action: str, request_id: Any, data: Any) -> ResultFrame:
    return {"type": "result", "action": action, "request_id": request_id, "data": data}


async def braid_error(request: Request, exc: Exception) -> Response:
    """The app's handler of every `BraidError` an HTTP route raises."""
    assert isinstance(exc, BraidError)
    return error_response(exc)


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
    return JSONResponse(error_body(as_braid_error(exc)), status_code=500)
