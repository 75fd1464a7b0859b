"""The router's caller-visible failures: one exception carrying status, outcome and text, and
the texts of the failures both data paths answer alike (a worker that refuses, fails, stays
silent, or a request a drain cut off).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from domain.refs import ActorRef
    from router.core.upstream import Upstream

log = logging.getLogger(__name__)

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


def worker_unreachable(target: ActorRef, upstream: Upstream | str) -> RouteError:
    """502 for a RUNNING actor whose worker refuses connections: maybe for good (a dead
    sandbox), so no promise of recovery; the control plane may later mark it CRASHED."""
    log.warning("actor %s is RUNNING but its worker %s does not answer", target, upstream)
    ref = f"actor {target.name} -a {target.atespace}"
    return RouteError(
        502,
        ERROR,
        f"actor {target} is RUNNING but its worker {upstream} does not answer; if this "
        f"persists, check 'ate describe {ref}' or revert it with 'ate revert {ref}'",
    )


def response_head_timeout(actor: str, upstream: Upstream | str, what: str) -> RouteError:
    """The 504 for a worker that sent no response head in time; ``what`` names the missing part
    (``"response head within 120s"``)."""
    return RouteError(504, TIMEOUT, f"actor {actor} at {upstream} sent no {what}; retry, or raise "
                      "the router's --response-head-timeout if it needs longer")  # fmt: skip


def cut_by_drain(actor: str) -> RouteError:
    """The 503 of a request a drain cut off before the actor answered it."""
    return RouteError(
        503,
        ERROR,
        f"actor {actor} is being suspended and this request did not finish within the router's "
        "--drain-timeout, so it was cut off before the actor answered; send it again (the actor "
        "resumes at its next request), or raise --drain-timeout for requests that take longer",
        retry_after=1,
    )


def upstream_failed(actor: str, upstream: Upstream | str, detail: str) -> RouteError:
    """The 502 for a worker that failed after the connection was made, before its answer."""
    return RouteError(
        502,
        ERROR,
        f"actor {actor} at {upstream} failed before answering: {detail}",
    )
