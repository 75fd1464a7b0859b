"""API errors and the one exception handler that turns every error into `{reason, message, details}`."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.strict import DOCUMENT_LIMIT, NESTED_FIELD
from domain.reasons import Reason
from store import StoreError
from store.errors import CONNECTION_ERRORS, is_connection_error

log = logging.getLogger("ate.api")

STATUS_BY_REASON: dict[Reason, int] = {
    Reason.INVALID_ARGUMENT: 400,
    Reason.UNAUTHENTICATED: 401,
    Reason.PERMISSION_DENIED: 403,
    Reason.NOT_FOUND: 404,
    Reason.METHOD_NOT_ALLOWED: 405,
    Reason.REQUEST_TOO_LARGE: 413,
    Reason.HEADERS_TOO_LARGE: 431,
    Reason.UNSUPPORTED_MEDIA_TYPE: 415,
    Reason.ALREADY_EXISTS: 409,
    Reason.OPERATION_IN_PROGRESS: 409,
    Reason.FAILED_PRECONDITION: 409,
    Reason.SNAPSHOT_DAMAGED: 409,
    Reason.VERSION_CONFLICT: 409,
    Reason.NO_CAPACITY: 503,
    Reason.UNREACHABLE: 503,
    Reason.NO_MATCHING_WORKER: 409,
    Reason.NODE_RETIRED: 410,
    Reason.TIMEOUT: 504,
    Reason.UNAVAILABLE: 503,
    Reason.INTERNAL: 500,
}


class ApiError(Exception):
    """An error for the user: a reason (HTTP status by `STATUS_BY_REASON`), a message, details."""

    reason: Reason = Reason.INTERNAL

    def __init__(self, message: str, details: dict[str, Any] | None = None, reason: Reason | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if reason is not None:
            self.reason = reason


class InvalidArgument(ApiError):
    """Bad input; the message names the field and the allowed values."""

    reason = Reason.INVALID_ARGUMENT


class OperationInProgress(ApiError):
    """Another kind of operation holds the actor's workflow-ID lock."""

    reason = Reason.OPERATION_IN_PROGRESS


class Timeout(ApiError):
    """The operation did not finish in time; it keeps running."""

    reason = Reason.TIMEOUT


REASON_BY_STATUS: dict[int, Reason] = {
    400: Reason.INVALID_ARGUMENT,
    404: Reason.NOT_FOUND,
    405: Reason.METHOD_NOT_ALLOWED,
    413: Reason.REQUEST_TOO_LARGE,
    415: Reason.UNSUPPORTED_MEDIA_TYPE,
}
"""The reason of an HTTP error the framework raises itself (no route, wrong method, unreadable body)."""


def error_body(reason: Reason, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one error format of the API: `{reason, message, details}`."""
    return {"reason": reason.value, "message": message, "details": details or {}}


def error_response(
    reason: Reason, message: str, details: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON error body with the status that belongs to `reason`."""
    return JSONResponse(
        status_code=STATUS_BY_REASON.get(reason, 500),
        content=error_body(reason, message, details),
        headers=headers or ({"WWW-Authenticate": 'Bearer realm="ate"'} if reason == Reason.UNAUTHENTICATED else None),
    )


def framework_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """An HTTP error raised by the framework itself (no such route, a method the route does not
    take, an unreadable body) in the one error format, with its own status and headers."""
    status = error.status_code
    reason = REASON_BY_STATUS.get(status, Reason.INVALID_ARGUMENT if status < 500 else Reason.INTERNAL)
    headers = dict(error.headers or {})
    if status == 404:
        message = f"no such route: {request.method} {request.url.path} (GET /docs lists the API's routes)"
    elif status == 405:
        allowed = _allowed_methods(request)
        headers = {k: v for k, v in headers.items() if k.lower() != "allow"} | {"allow": ", ".join(allowed)}
        message = f"method {request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}"
    elif status == 400:
        message = "invalid request: the body could not be read; send JSON with Content-Type: application/json"
    else:
        message = str(error.detail)
    return JSONResponse(status_code=status, content=error_body(reason, message), headers=headers)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes on the request's path (Starlette's own 405 names only the
    methods of the first route that matched the path)."""
    routes = request.app.router.routes
    return [m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


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
        field = _field_path(location)
        below = str((error.get("ctx") or {}).get("path") or "") if error.get("type") in (DOCUMENT_LIMIT, NESTED_FIELD) else ""
        if below:
            field = below if field == "body" else f"{field}{'' if below.startswith('[') else '.'}{below}"
        fields.append({"field": field, "message": message})
    text = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return f"invalid request: {text}", fields


DATABASE_RETRY_AFTER_SECONDS = 5
"""The Retry-After of a 503 while the database is unreachable (a PostgreSQL restart takes seconds)."""

def _one_line(error: BaseException) -> str:
    """The error's type and first line, for the message (no host or query in it)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, StoreError, framework HTTP errors, request validation errors and anything
    unexpected to the one error format."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return error_response(error.reason, error.message, error.details)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, error: StoreError) -> JSONResponse:
        return error_response(error.reason, error.message, error.details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return framework_error(request, error)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        message, fields = validation_message(list(error.errors()))
        return error_response(Reason.INVALID_ARGUMENT, message, {"fields": fields})

    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        if is_connection_error(error):
            log.warning("database unreachable in %s %s: %s", request.method, request.url.path, _one_line(error))
            return error_response(
                Reason.UNAVAILABLE,
                f"the api-server cannot reach its database (PostgreSQL: {_one_line(error)}); retry in a few "
                "seconds. If it lasts, check that PostgreSQL runs and the api-server's --database-url",
                {"retry_after_seconds": DATABASE_RETRY_AFTER_SECONDS},
                headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
            )
        incident = uuid.uuid4().hex[:12]
        log.error("unexpected error (incident %s) in %s %s", incident, request.method, request.url.path,
                  exc_info=error)
        return error_response(  # what failed inside stays in the log: it can name tables, values, hosts
            Reason.INTERNAL, f"internal server error (incident {incident} in the api-server's log)", {"incident": incident}
        )

    # The database's errors are answered here, below the server-error middleware (which would
    # re-raise them to the server after the answer); anything else unexpected there.
    for kind in CONNECTION_ERRORS:
        app.add_exception_handler(kind, _unexpected)
    app.add_exception_handler(Exception, _unexpected)
