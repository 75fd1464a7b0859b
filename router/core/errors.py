"""The router's caller-visible failures: one exception carrying status, outcome and text."""

from __future__ import annotations

# Outcome labels of ate_router_requests_total / ate_router_request_duration_seconds.
OK = "ok"  # relayed to an actor that was RUNNING (from the cache)
PARKED_OK = "parked_ok"  # relayed after waiting for the actor to be RUNNING (a resume)
NOT_FOUND = "not_found"  # no such actor or atespace (404)
NO_ROOM = "no_room"  # the actor could not be placed: no worker matches, or none has room (503)
TIMEOUT = "timeout"  # not RUNNING within the park budget, or a proxy timeout ran out (504)
ERROR = "error"  # the worker failed, broke HTTP or broke off its response (502, or truncated)
BAD_TARGET = "bad_target"  # no usable ate-target-actor header or Host (400)
UNAVAILABLE = "unavailable"  # the control plane could not resume it (unreachable, precondition, full)
UNAUTHENTICATED = "unauthenticated"  # the template asks for a token and none valid came (401)
FORBIDDEN = "forbidden"  # the token does not grant access to the actor (403)
CLIENT_GONE = "client_gone"  # the client left before its answer was complete

# Retry-After values, in seconds.
RETRY_CAPACITY_SECONDS = 1  # no capacity, parking lot full, actor busy with another operation
RETRY_RESUMING_SECONDS = 2  # a resume still running, control plane unreachable or failing


class RouteError(Exception):
    """A request the router answers itself, with a one-line plain-text body.

    Attributes:
        status: HTTP status to answer (400, 401, 403, 404, 502, 503, 504).
        outcome: Metrics outcome label (``not_found``, ``unavailable``, ...).
        message: One line naming the actor and, where possible, what to do.
        retry_after: Seconds for a ``Retry-After`` header (transient 503/504), or None for
            failures a retry will not fix.
    """

    def __init__(
        self, status: int, outcome: str, message: str, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.message = " ".join(message.split())
        self.retry_after = retry_after
