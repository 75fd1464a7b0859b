"""Errors the store raises; the API maps them to HTTP codes, activities to workflow failures.

Also which of the database driver's errors mean PostgreSQL cannot be reached (`CONNECTION_ERRORS`,
`is_connection_error`), so that no consumer of the store has to know the driver.
"""

from __future__ import annotations

import traceback
from typing import Any

import asyncpg

from domain.reasons import Reason
from domain.states import Transition


class StoreError(Exception):
    """Base class: a message written for the user, a machine-readable reason, optional details."""

    reason = Reason.INTERNAL

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidArgument(StoreError):
    """The request itself is wrong (e.g. a registration a worker could not honour); the message
    names the field."""

    reason = Reason.INVALID_ARGUMENT


class NotFound(StoreError):
    """The named atespace, template, actor or node does not exist."""

    reason = Reason.NOT_FOUND


class AlreadyExists(StoreError):
    """The name is taken."""

    reason = Reason.ALREADY_EXISTS


class FailedPrecondition(StoreError):
    """The object is in a state that does not allow the request (the message names both)."""

    reason = Reason.FAILED_PRECONDITION


class VersionConflict(StoreError):
    """Someone else changed the row between read and write; retry."""

    reason = Reason.VERSION_CONFLICT


class NodeRetired(StoreError):
    """The node was retired (its worker pod deleted) and may not register again."""

    reason = Reason.NODE_RETIRED


class NoCapacity(StoreError):
    """No worker passes every placement check; the message names the check that removed the last."""

    reason = Reason.NO_CAPACITY


class NoMatchingWorker(NoCapacity):
    """No worker could ever take the actor as configured (sandbox class or labels): not a shortage."""

    reason = Reason.NO_MATCHING_WORKER


class PinnedNodeFull(NoCapacity):
    """A paused actor's node has no room while other nodes do: upload its local snapshot, unpin
    it and place it elsewhere (ARCHITECTURE.md, "Placement": the pinned node is full)."""

    reason = Reason.PINNED_NODE_FULL


class ActorUnreachable(StoreError):
    """The actor is UNREACHABLE: its node stopped answering and the grace has not run out. Not
    final: it is RUNNING again when the node returns, CRASHED when the grace ends (the router
    parks its requests meanwhile)."""

    reason = Reason.UNREACHABLE


def refused(transition: Transition, actor: str, state: str) -> FailedPrecondition:
    """The error of an operation asked of an actor in a state the state table does not start it
    from (`domain.states.TRANSITIONS`); the details carry the state found."""
    return FailedPrecondition(transition.refusal(actor, state), {"state": state})


_SERVER_GOING_AWAY: tuple[type[Exception], ...] = (
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
)

CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    *_SERVER_GOING_AWAY,
)
"""The exception classes a store call may raise when PostgreSQL cannot be reached (an `OSError`
only counts when raised inside the driver: see `is_connection_error`); for registering handlers."""


def is_connection_error(error: BaseException) -> bool:
    """Whether `error`, raised by a store call, means PostgreSQL cannot be reached (down,
    restarting, refusing connections, the connection lost), as opposed to a failed query: the
    driver's connection errors, the server's shutdown errors, and an OS-level error (refused, no
    socket, timeout) raised inside the driver."""
    if isinstance(error, (asyncpg.PostgresConnectionError, asyncpg.exceptions.ConnectionDoesNotExistError,
                          *_SERVER_GOING_AWAY)):
        return True
    if isinstance(error, OSError):  # TimeoutError and ConnectionRefusedError are OSErrors
        return any(frame.f_globals.get("__name__", "").startswith("asyncpg")
                   for frame, _ in traceback.walk_tb(error.__traceback__))
    return False
