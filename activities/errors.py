"""Turns store errors and atelet gRPC statuses into Temporal activity failures.

Failures the caller must see (unknown actor, wrong state, no room, a refused request) are
non-retryable `ApplicationError`s whose `type` is the store reason, so the API maps them to HTTP
codes without reading message text. Everything else is retried by Temporal.
"""

from __future__ import annotations

import grpc
from temporalio.exceptions import ApplicationError

from activities.store import StoreError, VersionConflict

_FINAL_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.FAILED_PRECONDITION: "FailedPrecondition",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
}


def from_store_error(error: StoreError) -> Exception:
    """A store error as an activity failure (VersionConflict stays retryable)."""
    return ApplicationError(
        error.message, error.details, type=error.reason, non_retryable=not isinstance(error, VersionConflict)
    )


def from_grpc_error(error: grpc.aio.AioRpcError, call: str, address: str) -> Exception:
    """An atelet status as an activity failure: final codes non-retryable, the rest retried."""
    code = error.code()
    message = f"while calling atelet {call} on {address}: {error.details() or code.name}"
    reason = _FINAL_GRPC.get(code)
    if reason is not None:
        return ApplicationError(message, type=f"Atelet{reason}", non_retryable=True)
    return ApplicationError(message, type=f"Atelet{code.name.title().replace('_', '')}")
