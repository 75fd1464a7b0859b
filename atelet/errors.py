"""The one exception type of the atelet: a gRPC status code plus a human-readable reason.

Every module raises ``AteletError``; ``atelet.service`` turns it into the gRPC status of the call.
Codes follow ``atelet.proto``: INVALID_ARGUMENT (bad path, URI or spec), NOT_FOUND (unknown worker
or snapshot), FAILED_PRECONDITION (worker busy, manifest mismatch), PERMISSION_DENIED (a snapshot store refused
the node's credentials), UNAVAILABLE (retryable), INTERNAL (anything else).
"""

from __future__ import annotations

import grpc


class AteletError(Exception):
    """An operation failed with gRPC status ``code``; ``reason`` says why, naming the field."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason


def invalid(reason: str) -> AteletError:
    """INVALID_ARGUMENT: a bad path, URI or spec (the reason names the field)."""
    return AteletError(grpc.StatusCode.INVALID_ARGUMENT, reason)


def not_found(reason: str) -> AteletError:
    """NOT_FOUND: unknown worker or snapshot."""
    return AteletError(grpc.StatusCode.NOT_FOUND, reason)


def precondition(reason: str) -> AteletError:
    """FAILED_PRECONDITION: the worker is busy, the actor is not there, a manifest mismatches."""
    return AteletError(grpc.StatusCode.FAILED_PRECONDITION, reason)


def damaged(reason: str) -> AteletError:
    """DATA_LOSS: a snapshot's files do not match its manifest (missing, another size, another
    SHA-256): no retry of the same call can succeed."""
    return AteletError(grpc.StatusCode.DATA_LOSS, reason)


def unavailable(reason: str) -> AteletError:
    """UNAVAILABLE: retryable (e.g. a connected socket blocked a checkpoint)."""
    return AteletError(grpc.StatusCode.UNAVAILABLE, reason)


def permission_denied(reason: str) -> AteletError:
    """PERMISSION_DENIED: a store refused this node's credentials (no retry fixes that)."""
    return AteletError(grpc.StatusCode.PERMISSION_DENIED, reason)


def internal(reason: str) -> AteletError:
    """INTERNAL: anything else."""
    return AteletError(grpc.StatusCode.INTERNAL, reason)
