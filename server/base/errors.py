"""Domain errors. Each has a `code` that the transports map once to HTTP statuses and
WebSocket error frames (see server/web/errors.py)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from server.base.results import Conflicted, PathConflict


class ErrorDetails(TypedDict, total=False):
    """What a refusal names beyond its message, for the page to show it."""

    conflicts: list[Conflicted] | list[PathConflict]  # the paths in the way
    turn_id: str
    path: str
    reason: str  # why a name is refused
    max_files: int  # a limit an upload passed
    max_bytes: int
    actions: list[str]  # the socket's actions (an unknown one was asked for)
    message_count: int
    paths: list[str]  # the files of a per-file revert (its conflicts, or the unknown ones)
    resumed_by_run_id: str  # the run that already went on with a run resumed again


class ErrorInfo(TypedDict):
    """An error as a frame or a response carries it: `{code, message, details?}`."""

    code: str
    message: str
    details: NotRequired[ErrorDetails]


class BraidError(Exception):
    code = "internal"

    def __init__(self, message: str, details: ErrorDetails | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def as_dict(self) -> ErrorInfo:
        out: ErrorInfo = {"code": self.code, "message": self.message}
        if self.details is not None:
            out["details"] = self.details
        return out


class BadRequest(BraidError):
    code = "bad_request"


class NotFound(BraidError):
    code = "not_found"


class Forbidden(BraidError):
    code = "forbidden"


class Conflict(BraidError):
    code = "conflict"


class Busy(BraidError):
    code = "busy"


class Unauthorized(BraidError):
    code = "unauthorized"


class TooLarge(BraidError):
    """An upload, an import or an update from source past BRAID_IMPORT_MAX_BYTES or
    BRAID_IMPORT_MAX_FILES (HTTP 413); nothing of it is kept."""

    code = "too_large"


class TooMany(BraidError):
    """Past a user's fair share (DESIGN §4 "Fair shares and durability"): turns, queued
    messages or sub-agent runs (HTTP 429); nothing of the refused request is kept."""

    code = "too_many"
