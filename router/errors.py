"""The router's caller-visible failures: one exception carrying status, outcome and text."""

from __future__ import annotations

# Outcome labels of ate_router_requests_total / ate_router_request_duration_seconds.
OK = "ok"
NOT_FOUND = "not_found"
BAD_TARGET = "bad_target"
UNAVAILABLE = "unavailable"
TIMEOUT = "timeout"
UPSTREAM_ERROR = "upstream_error"
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"

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
