"""The Prometheus families of the nginx data path: nginx's request counters read at each scrape
(the Python data path's names) with the requests nginx relayed to the control service's Python
router added in, beside the control service's own from the default registry."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from router.core.metrics import DURATION_BUCKETS
from router.nginx.admin import NginxAdmin

log = logging.getLogger(__name__)

_DATA_PATH_METRICS = (
    "ate_router_requests",
    "ate_router_request_duration_seconds",
    "ate_router_received_bytes",
    "ate_router_sent_bytes",
)


class RelayedTally:
    """The requests nginx relayed to the control service's Python router (WebSockets, event
    streams, chunked uploads), counted as nginx counts its own (``n:<outcome>``, ``s:<outcome>``,
    ``b:<outcome>:<bucket index|inf>``), to be added to nginx's counters.

    Attributes:
        stats: The counters.
    """

    def __init__(self) -> None:
        self.stats: dict[str, float] = {}

    def observe(self, outcome: str, seconds: float) -> None:
        """Count one finished relayed request (a router.core.metrics.ObserveRequest)."""
        stats = self.stats
        for name, value in ((f"n:{outcome}", 1.0), (f"s:{outcome}", seconds)):
            stats[name] = stats.get(name, 0.0) + value
        index = next((str(i) for i, bound in enumerate(DURATION_BUCKETS, start=1) if seconds <= bound), "inf")
        bucket = f"b:{outcome}:{index}"
        stats[bucket] = stats.get(bucket, 0.0) + 1


class NginxRequestMetrics(Collector):
    """The data path's Prometheus families, read from nginx's counters at each scrape (the
    relayed requests added in): requests and their duration by outcome, body bytes in and out
    (the same names as the Python path)."""

    def __init__(self, admin: NginxAdmin, relayed: RelayedTally | None = None) -> None:
        self.admin = admin
        self.relayed = relayed or RelayedTally()

    def collect(self) -> Iterator[Any]:
        """Yield the four families (none when nginx does not answer)."""
        try:
            stats = self.admin.stats()
        except httpx.HTTPError as exc:
            log.warning("nginx counters unavailable: %s", exc)
            return
        for name, value in list(self.relayed.stats.items()):
            stats[name] = stats.get(name, 0.0) + value
        # The body bytes of the relayed requests: the Python proxy counts them in the default
        # registry, where nothing else in this process does (nginx counts its own).
        for name, sample in (("in", "ate_router_received_bytes_total"), ("out", "ate_router_sent_bytes_total")):
            stats[name] = stats.get(name, 0.0) + (REGISTRY.get_sample_value(sample) or 0.0)
        requests = CounterMetricFamily(
            "ate_router_requests", "Requests handled by the router, by outcome.", labels=["outcome"]
        )
        duration = HistogramMetricFamily(
            "ate_router_request_duration_seconds",
            "Time from request arrival to the end of the response, by outcome.",
            labels=["outcome"],
        )
        outcomes = sorted({name[2:] for name in stats if name.startswith("n:")})
        for outcome in outcomes:
            requests.add_metric([outcome], stats[f"n:{outcome}"])
            cumulative, buckets = 0.0, []
            for index, bound in enumerate(DURATION_BUCKETS, start=1):
                cumulative += stats.get(f"b:{outcome}:{index}", 0)
                buckets.append((f"{bound:g}", cumulative))
            buckets.append(("+Inf", cumulative + stats.get(f"b:{outcome}:inf", 0)))
            duration.add_metric([outcome], buckets, stats.get(f"s:{outcome}", 0.0))
        received = CounterMetricFamily(
            "ate_router_received_bytes",
            "Request body bytes received from clients (by nginx: their Content-Length).",
            value=stats.get("in", 0),
        )
        sent = CounterMetricFamily(
            "ate_router_sent_bytes", "Response body bytes sent to clients.", value=stats.get("out", 0)
        )
        yield from (requests, duration, received, sent)

    def count(self, outcome: str) -> float:
        """Requests counted with ``outcome`` (by nginx, and relayed; 0 before the first; blocking)."""
        name = f"n:{outcome}"
        return self.admin.stats().get(name, 0.0) + self.relayed.stats.get(name, 0.0)


class _Rest(Collector):
    """Every family of the default registry but the data path's (those come from nginx)."""

    def collect(self) -> Iterator[Any]:
        for family in REGISTRY.collect():
            if family.name not in _DATA_PATH_METRICS:
                yield family


def metrics_registry(requests: NginxRequestMetrics) -> CollectorRegistry:
    """The registry the metrics port exports in nginx mode: the request counters (``requests``:
    nginx's and the relayed ones), and the control service's own (parked requests, park
    durations, resumes) from the default one."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(requests)
    registry.register(_Rest())
    return registry
