"""The failure reasons of ate: one vocabulary for the store, the activities, the workflows and the API.

A reason is the machine-readable name of a failure. The store raises it (`store.errors`, each
error class carries one), an activity turns it into the `type` of its `ApplicationError`
(`activities.errors`), a workflow tests that type (`error.type == Reason.PINNED_NODE_FULL`), and
the API answers it as `{"reason": ...}` with the HTTP status `api.errors.STATUS_BY_REASON` gives.
Everyone spells a reason through this enum, so a misspelling is an `AttributeError` at import or a
type error under mypy, not a silent mismatch.

The values are wire strings: recorded in Temporal histories (failure types) and answered by the
API. They never change; a `Reason` compares and hashes equal to its value (a `StrEnum`), so a
type read back from a history (a plain `str`) finds its member in a set or a dict.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why something failed; the value is the wire string (ApplicationError type, API `reason`)."""

    # ---- the store's refusals (store.errors), carried through activities and workflows to the API
    INTERNAL = "Internal"
    """Anything unexpected (a bug, a dependency's failure); the API answers 500."""
    INVALID_ARGUMENT = "InvalidArgument"
    """The request itself is wrong; the message names the field."""
    NOT_FOUND = "NotFound"
    """The named atespace, template, actor or node does not exist."""
    ALREADY_EXISTS = "AlreadyExists"
    """The name is taken."""
    FAILED_PRECONDITION = "FailedPrecondition"
    """The object is in a state that does not allow the request (the message names both)."""
    VERSION_CONFLICT = "VersionConflict"
    """Someone else changed the row between read and write; retried."""
    NODE_RETIRED = "NodeRetired"
    """The node was retired and may not register again."""
    NO_CAPACITY = "NoCapacity"
    """No worker has room for the actor now (a shortage: it may pass)."""
    NO_MATCHING_WORKER = "NoMatchingWorker"
    """No worker could ever take the actor as configured (sandbox class or labels)."""
    PINNED_NODE_FULL = "PinnedNodeFull"
    """A paused actor's node is full while others have room: upload, unpin, place elsewhere."""
    UNREACHABLE = "Unreachable"
    """The actor is UNREACHABLE: its node is silent and the grace has not run out."""

    # ---- the activities' own failures
    SUPERSEDED = "Superseded"
    """The operation lost its place (a revert or a delete took the actor over): nothing to undo."""
    NO_ATELET = "NoAtelet"
    """No (suitable) atelet is alive to do the call; retried later."""
    ATELET_INVALID_ARGUMENT = "AteletInvalidArgument"
    """An atelet refused the call as malformed (gRPC INVALID_ARGUMENT; final)."""
    ATELET_NOT_FOUND = "AteletNotFound"
    """An atelet does not have what the call names (gRPC NOT_FOUND; final)."""
    ATELET_FAILED_PRECONDITION = "AteletFailedPrecondition"
    """An atelet's sandbox is not in the state the call needs (gRPC FAILED_PRECONDITION; final)."""
    ATELET_DATA_LOSS = "AteletDataLoss"
    """A snapshot's files do not match its manifest (gRPC DATA_LOSS; final)."""
    ATELET_ALREADY_EXISTS = "AteletAlreadyExists"
    """An atelet already holds what the call would create (gRPC ALREADY_EXISTS; final)."""
    ATELET_PERMISSION_DENIED = "AteletPermissionDenied"
    """An atelet refused the caller (gRPC PERMISSION_DENIED; final)."""
    ATELET_UNIMPLEMENTED = "AteletUnimplemented"
    """An atelet does not know the call (gRPC UNIMPLEMENTED; final)."""
    ATELET_UNAVAILABLE = "AteletUnavailable"
    """No atelet answered, or it answered UNAVAILABLE (retried). The other retryable gRPC codes
    become `Atelet<Code>` the same way (`atelet_reason`)."""

    # ---- the workflows' own failures
    TIMEOUT = "Timeout"
    """A step (or the API's wait for an operation) got no answer in time; the operation goes on."""

    # ---- the API's own answers
    UNAUTHENTICATED = "Unauthenticated"
    """No valid token."""
    PERMISSION_DENIED = "PermissionDenied"
    """The token does not allow the request."""
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    """The route does not take the method."""
    REQUEST_TOO_LARGE = "RequestTooLarge"
    """The body is over the limit."""
    HEADERS_TOO_LARGE = "HeadersTooLarge"
    """The request head is over the limit."""
    UNSUPPORTED_MEDIA_TYPE = "UnsupportedMediaType"
    """The body is not JSON."""
    OPERATION_IN_PROGRESS = "OperationInProgress"
    """Another kind of operation holds the actor's workflow-ID lock."""
    SNAPSHOT_DAMAGED = "SnapshotDamaged"
    """An operation's snapshot is damaged (an atelet's DATA_LOSS), told with what the user can do."""
    UNAVAILABLE = "Unavailable"
    """A dependency of the api-server (its database, the OIDC issuer) does not answer now."""


PLACEMENT_REFUSALS = frozenset(
    {
        Reason.NOT_FOUND,
        Reason.FAILED_PRECONDITION,
        Reason.NO_CAPACITY,
        Reason.NO_MATCHING_WORKER,
        Reason.UNREACHABLE,
        Reason.INVALID_ARGUMENT,
    }
)
"""The refusals of a resume's placement (`store.resumes.begin`), raised before anything is bound:
nothing to look up or roll back after one. PINNED_NODE_FULL is not among them: it is answered by
uploading the paused actor's snapshot and placing it again."""


def atelet_reason(code_name: str) -> str:
    """The failure type of an atelet call answered with gRPC status `code_name`.

    Args:
        code_name: the status code's name, e.g. "NOT_FOUND" or "DEADLINE_EXCEEDED".

    Returns:
        `Atelet<Code>` in CamelCase ("AteletNotFound", "AteletDeadlineExceeded"); the members
        `Reason.ATELET_*` spell those the workflows and the API test.
    """
    return f"Atelet{code_name.title().replace('_', '')}"
