"""Prometheus metrics of `ate controller`, served on `metrics_listen`.

- `ate_workerpool_workers{pool,state}`: gauge, the workers of each pool by state: `assigned`
  (ACTIVE and holding an actor), `idle` (ACTIVE, free) and `unavailable`. A
  HorizontalPodAutoscaler scales a WorkerPool on its assigned workers (deploy/base/hpa.yaml).
"""

from __future__ import annotations

from prometheus_client import Gauge

from store.records import WorkerRecord

WORKERS = Gauge("ate_workerpool_workers", "workers of each pool by state", ["pool", "state"])
STATES = ("assigned", "idle", "unavailable")


def state_of(worker: WorkerRecord) -> str:
    """A worker's state for autoscaling."""
    if worker.state != "ACTIVE":
        return "unavailable"
    return "assigned" if worker.holders else "idle"


def set_workers(workers: list[WorkerRecord]) -> dict[tuple[str, str], int]:
    """Set the gauge from every worker; returns the counts (pool, state) -> n."""
    counts: dict[tuple[str, str], int] = {}
    for worker in workers:
        key = (worker.pool, state_of(worker))
        counts[key] = counts.get(key, 0) + 1
    for pool in {w.pool for w in workers} | {labels[0] for labels in _known()}:
        for state in STATES:
            WORKERS.labels(pool, state).set(counts.get((pool, state), 0))
    return counts


def _known() -> list[tuple[str, ...]]:
    """The (pool, state) label sets exported so far (a pool whose workers all went shows 0)."""
    return [tuple(sample.labels.values()) for metric in WORKERS.collect() for sample in metric.samples]
