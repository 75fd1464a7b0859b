"""The router's caller-visible failures: one exception carrying status, outcome and text."""

from __future__ import annotations

# Outcome labels of ate_router_requests_total / ate_router_request_duration_seconds.
OK = "ok"
NOT_FOUND = "not_found"
BAD_TARGET = "bad_target"
UNAVAILABLE = "unavailable"
TIMEOUT = "timeout"
UPSTREAM_ERROR = "upstream_error"


class RouteError(Exception):
    """A request the router answers itself, with a one-line plain-text body.

    Attributes:
        status: HTTP status to answer (400, 404, 502, 503, 504).
        outcome: Metrics outcome label (``not_found``, ``unavailable``, ...).
        message: One line naming the actor and, where possible, what to do.
    """

    def __init__(self, status: int, outcome: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.message = " ".join(message.split())
