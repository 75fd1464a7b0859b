"""API errors and the one exception handler that turns every error into `{reason, message, details}`."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from activities.store import StoreError

log = logging.getLogger("ate.api")

STATUS_BY_REASON = {
    "InvalidArgument": 400,
    "Unauthenticated": 401,
    "PermissionDenied": 403,
    "NotFound": 404,
    "AlreadyExists": 409,
    "OperationInProgress": 409,
    "FailedPrecondition": 409,
    "VersionConflict": 409,
    "NoCapacity": 503,
    "NoMatchingWorker": 409,
    "NodeRetired": 410,
    "Timeout": 504,
    "Unavailable": 503,
    "Internal": 500,
}


class ApiError(Exception):
    """An error for the user: a reason (HTTP status by `STATUS_BY_REASON`), a message, details."""

    reason = "Internal"

    def __init__(self, message: str, details: dict[str, Any] | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if reason is not None:
            self.reason = reason


class InvalidArgument(ApiError):
    """Bad input; the message names the field and the allowed values."""

    reason = "InvalidArgument"


class OperationInProgress(ApiError):
    """Another kind of operation holds the actor's workflow-ID lock."""

    reason = "OperationInProgress"


class Timeout(ApiError):
    """The operation did not finish in time; it keeps running."""

    reason = "Timeout"


def error_response(reason: str, message: str, details: dict[str, Any] | None = None) -> JSONResponse:
    """The JSON error body with the status that belongs to `reason`."""
    return JSONResponse(
        status_code=STATUS_BY_REASON.get(reason, 500),
        content={"reason": reason, "message": message, "details": details or {}},
        headers={"WWW-Authenticate": 'Bearer realm="ate"'} if reason == "Unauthenticated" else None,
    )


def _field_path(location: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in location:
        if item in ("body",):
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "body"


def validation_message(errors: list[Any]) -> tuple[str, list[dict[str, str]]]:
    """One line per bad field (`spec.containers[0].image: ...`), and the same as a list."""
    fields = []
    for error in errors:
        location = tuple(x for x in error.get("loc", ()) if x not in ("function-after", "function-before"))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "extra_forbidden":
            message = "unknown field (not part of the schema)"
        fields.append({"field": _field_path(location), "message": message})
    text = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return f"invalid request: {text}", fields


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, StoreError, request validation errors and anything unexpected to JSON."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return error_response(error.reason, error.message, error.details)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, error: StoreError) -> JSONResponse:
        return error_response(error.reason, error.message, error.details)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        message, fields = validation_message(list(error.errors()))
        return error_response("InvalidArgument", message, {"fields": fields})

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response("Internal", f"internal server error: {error}")
