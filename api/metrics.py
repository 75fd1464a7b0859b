"""Prometheus metrics of the API server: operations by kind and outcome, workers by pool and state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram

from domain.reasons import Reason

OPERATIONS = Counter("ate_api_operations_total", "Operations requested through the API", ["operation", "outcome"])
OPERATION_SECONDS = Histogram(
    "ate_api_operation_duration_seconds",
    "Time from request to result of an operation, in seconds",
    ["operation", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
WORKERS = Gauge("ate_workers", "Workers by pool and state (idle, busy, unavailable)", ["pool", "state"])
WAITING_FOR_ROOM = Gauge(
    "ate_resumes_waiting_for_room",
    "Resumes waiting in the room queue because no worker had room, by the pool whose workers would take them "
    "('' when none would): the demand the pool could not place, for an autoscaler of the WorkerPool",
    ["pool"],
)


@contextmanager
def timed(operation: str) -> Iterator[None]:
    """Count and time one operation; the outcome is `ok` or the error's reason."""
    started = time.perf_counter()
    outcome = "ok"
    try:
        yield
    except Exception as error:
        outcome = str(getattr(error, "reason", Reason.INTERNAL))
        raise
    finally:
        OPERATIONS.labels(operation, outcome).inc()
        OPERATION_SECONDS.labels(operation, outcome).observe(time.perf_counter() - started)


RECOVERIES = Counter(
    "ate_actor_recoveries_total",
    "CRASHED actors the api-server started reverting by itself because their template says onCrash: <action>",
    ["action"],
)
IDLE_ACTIONS = Counter(
    "ate_idle_actions_total",
    "Idle policy steps the api-server started by itself, by action (Freeze, Pause, Suspend) and outcome (ok; "
    "abandoned: a request in flight won; failed)",
    ["action", "outcome"],
)
NODES_LOST = Counter("ate_nodes_lost_total", "Nodes found silent past their lease (workers UNAVAILABLE)")
UNREACHABLE_EXPIRED = Counter(
    "ate_unreachable_actors_crashed_total",
    "UNREACHABLE actors CRASHED because their node did not answer within the grace",
)
