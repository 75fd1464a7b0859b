"""One translation of what an activity can fail with into what the workflow and the user see.

`activity_defn(name)` is `temporalio.activity.defn` plus that translation, applied to every ate
activity: store errors and atelet gRPC statuses become `ApplicationError`s whose `type` is the
machine-readable reason (the API maps it to an HTTP code without reading message text) and whose
message is written for the user. Failures the caller must see (unknown actor, wrong state, no
room, a refused request, a workload that never woke up) are non-retryable; the rest (a version
conflict, an atelet that is restarting) are retried by Temporal.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import grpc
from temporalio import activity
from temporalio.exceptions import ApplicationError

from domain.activity_names import Activity
from domain.reasons import Reason, atelet_reason
from store import StoreError, VersionConflict

P = ParamSpec("P")
R = TypeVar("R")

_FINAL_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: Reason.ATELET_INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: Reason.ATELET_NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: Reason.ATELET_FAILED_PRECONDITION,
    grpc.StatusCode.DATA_LOSS: Reason.ATELET_DATA_LOSS,
    grpc.StatusCode.ALREADY_EXISTS: Reason.ATELET_ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED: Reason.ATELET_PERMISSION_DENIED,
    grpc.StatusCode.UNIMPLEMENTED: Reason.ATELET_UNIMPLEMENTED,
}
"""The atelet's statuses no retry can change, and the failure type each becomes (non-retryable)."""


class AteletCallFailed(Exception):
    """An atelet call failed: the atelet answered with a non-OK status, or none could be reached.

    Args:
        call: the RPC, e.g. "Restore".
        address: the atelet's host:port.
        error: grpc's error (its code and details).
        unreachable: no atelet answered at all (down or restarting: the channel could not
            connect; `activities.atelet_channels.connect_failed`), as opposed to one that refused.
    """

    def __init__(self, call: str, address: str, error: grpc.aio.AioRpcError, *, unreachable: bool = False) -> None:
        super().__init__(atelet_failure_text(call, address, error.code(), error.details() or "", unreachable))
        self.call = call
        self.address = address
        self.code = error.code()
        self.unreachable = unreachable
        """No atelet answered at all (down or restarting), as opposed to one that refused."""


def atelet_failure_text(call: str, address: str, code: grpc.StatusCode, details: str, unreachable: bool) -> str:
    """The user's text of a failed atelet call: the atelet's own message, or, when it could not
    be reached at all (`unreachable`), that it is down or restarting with the connection's last
    error (gRPC's `failed to connect to all addresses; last error: UNKNOWN: ipv4:...: Failed to
    connect to remote host: Connection refused` says less, at more length). The details' text is
    only shown, never decided on."""
    if unreachable:
        cause = details.rstrip().rpartition(": ")[2] or "no connection"
        return (f"the atelet at {address} did not answer the {call} call ({cause}): the node's agent is down or "
                "restarting")
    return f"while calling atelet {call} on {address}: {details or code.name}"


def from_store_error(error: StoreError) -> ApplicationError:
    """A store error as an activity failure (VersionConflict stays retryable)."""
    return ApplicationError(
        error.message, error.details, type=error.reason, non_retryable=not isinstance(error, VersionConflict)
    )


def from_atelet_error(error: AteletCallFailed) -> ApplicationError:
    """An atelet status as an activity failure: type `Atelet<Code>` (`domain.reasons.atelet_reason`);
    final codes non-retryable."""
    reason = _FINAL_GRPC.get(error.code)
    if reason is not None:
        return ApplicationError(str(error), type=reason, non_retryable=True)
    return ApplicationError(str(error), type=atelet_reason(error.code.name))


def activity_defn(name: Activity) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """`@activity.defn(name=name)` whose store and atelet failures reach the workflow translated
    (see the module docstring); any other exception is left to Temporal (retried)."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def translated(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await fn(*args, **kwargs)
            except StoreError as error:
                raise from_store_error(error) from error
            except AteletCallFailed as error:
                raise from_atelet_error(error) from error

        defined: Any = activity.defn(name=name.value)(translated)
        return defined  # type: ignore[no-any-return]

    return decorate
