"""Prometheus metrics of the router and the separate server that exposes them."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
"""Buckets of ``ate_router_request_duration_seconds``, in seconds (the nginx data path uses them too)."""

REQUESTS = Counter(
    "ate_router_requests_total",
    "Requests handled by the router, by outcome.",
    ["outcome"],
)
REQUEST_DURATION = Histogram(
    "ate_router_request_duration_seconds",
    "Time from request arrival to the end of the response, by outcome (ok, parked_ok, not_found, no_room, "
    "timeout, error, bad_target, unavailable, unauthenticated, forbidden, client_gone; see router.core.errors).",
    ["outcome"],
    buckets=DURATION_BUCKETS,
)
RESUMES = Counter(
    "ate_router_resumes_total",
    "Resume calls made to the API, by outcome.",
    ["outcome"],
)
RESUMES_STARTED = Counter(
    "ate_router_resumes_started_total",
    "Resume calls started (one per actor at a time, shared by every request parked on it).",
)
PARK_DURATION = Histogram(
    "ate_router_park_duration_seconds",
    "Time a request waited for its actor to be RUNNING (whatever the end: running, refused, budget spent, client gone).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
RECEIVED_BYTES = Counter(
    "ate_router_received_bytes_total",
    "Request body bytes received from clients and sent on to actors.",
)
SENT_BYTES = Counter(
    "ate_router_sent_bytes_total",
    "Response body bytes received from actors and sent on to clients.",
)
PARKED = Gauge(
    "ate_router_parked_requests",
    "Requests currently waiting for their actor to be RUNNING.",
)
PARKED_NO_ROOM = Gauge(
    "ate_router_parked_no_room_requests",
    "Requests currently parked because no worker has room for their actor (the API answered their resume "
    "NoCapacity; they wait and retry within the park budget): demand that could not be placed, which an "
    "autoscaler can grow a worker pool for. Not labelled by pool: the resume answer does not name one.",
)

DRAINS = Counter(
    "ate_router_drains_total",
    "Drains of an actor before its checkpoint carried out, by result: clean (every request in flight "
    "finished within --drain-timeout) or cut (some were cut off at it).",
    ["result"],
)
DRAIN_DURATION = Histogram(
    "ate_router_drain_duration_seconds",
    "Time from a drain's arrival to its acknowledgement being ready (requests in flight finishing).",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DRAIN_CUT_REQUESTS = Counter(
    "ate_router_drain_cut_requests_total",
    "Requests in flight cut off because they outlasted --drain-timeout when their actor was drained.",
)
DRAIN_HELD = Gauge(
    "ate_router_drain_held_requests",
    "Requests currently held because their actor is being drained (served after its resume).",
)


ObserveRequest = Callable[[str, float], None]
"""Counts one finished request: ``(outcome, seconds)`` (``observe_request``, or the nginx data
path's tally of relayed requests)."""


def observe_request(outcome: str, seconds: float) -> None:
    """Count one finished request: ``ate_router_requests_total`` and its duration histogram.

    Args:
        outcome: Its outcome (router.core.errors).
        seconds: From its arrival to the end of its response.
    """
    REQUESTS.labels(outcome).inc()
    REQUEST_DURATION.labels(outcome).observe(seconds)


def serve_metrics(host: str, port: int, registry: CollectorRegistry = REGISTRY) -> object:
    """Serve ``/metrics`` on its own port in a background thread.

    Args:
        host: Address to bind.
        port: Port to bind (0 picks one).
        registry: What to export (the nginx data path adds nginx's request counters).

    Returns:
        The HTTP server; call ``shutdown()`` on it to stop.
    """
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
