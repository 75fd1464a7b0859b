"""Prometheus metrics of the atelet, served on ``metrics_listen`` by prometheus_client.

- ``ate_atelet_operations_total{operation,outcome}``: counter; outcome is ``ok`` or the gRPC code.
- ``ate_atelet_operation_duration_seconds{operation,outcome}``: histogram, seconds.
- ``ate_atelet_workers{pool,state}``: gauge, workers per pool and state (idle|running|exited).
- ``ate_atelet_snapshot_cache_total{result}``: counter of restores from object storage by
  ``hit`` (served by the node's cache) or ``miss`` (downloaded).
- ``ate_atelet_snapshot_cache_bytes``: gauge, bytes the cache holds.
- ``ate_atelet_frozen_sandboxes{pool}``: gauge, running sandboxes that are frozen (Freeze) per pool.
- ``ate_atelet_freeze_duration_seconds{action,method}``: histogram, seconds until the sandbox was
  frozen (``action`` freeze) or runs again (thaw), by how (``cgroup v1 freezer``, ``runsc pause``,
  ``qmp stop``...); finer buckets than the operations' (a cgroup freeze takes ~0.4-12 ms).
- ``ate_egress_requests_total{actor,destination}``: counter of the requests (and tunnels) the egress
  proxy let through (``atelet.egress``), ``actor`` ``atespace/name``, ``destination`` ``host:port``
  as asked.
- ``ate_egress_bytes_total{actor,destination,direction}``: counter of their bytes, ``sent`` by
  the actor or ``received`` by it (headers included; a tunnel's whole stream).
- ``ate_egress_denied_total{actor,destination,rule}``: counter of the connections and requests
  it refused, by the rule that refused them (``no rule allows ...``, ``protected address``,
  ``no egress policy``, ``host conflict``...).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram, start_http_server

OPERATIONS = Counter("ate_atelet_operations_total", "atelet operations by outcome", ["operation", "outcome"])
DURATION = Histogram(
    "ate_atelet_operation_duration_seconds", "atelet operation duration in seconds", ["operation", "outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
WORKERS = Gauge("ate_atelet_workers", "workers of this node by pool and state", ["pool", "state"])
STATES = ("idle", "running", "exited")
CACHE = Counter("ate_atelet_snapshot_cache_total", "restores from object storage by cache result", ["result"])
CACHE_BYTES = Gauge("ate_atelet_snapshot_cache_bytes", "bytes held by the node's snapshot cache")
FROZEN = Gauge("ate_atelet_frozen_sandboxes", "frozen sandboxes of this node by pool", ["pool"])
FREEZE_DURATION = Histogram(
    "ate_atelet_freeze_duration_seconds", "seconds to freeze or thaw a sandbox", ["action", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)

EGRESS_REQUESTS = Counter("ate_egress_requests_total", "requests and tunnels the egress proxy let through",
                          ["actor", "destination"])  # fmt: skip
EGRESS_BYTES = Counter("ate_egress_bytes_total", "bytes through the egress proxy, sent or received by the actor",
                       ["actor", "destination", "direction"])  # fmt: skip
EGRESS_DENIED = Counter("ate_egress_denied_total", "connections and requests the egress proxy refused",
                        ["actor", "destination", "rule"])  # fmt: skip
EGRESS_CUT = Counter("ate_egress_cut_total", "outbound connections still open at the egress drain timeout, cut for "
                     "a checkpoint", ["actor"])  # fmt: skip


MAX_DESTINATIONS_PER_ACTOR = 100
"""An actor's egress series name at most this many destinations; the rest count under
``OTHER_DESTINATION`` (an actor choosing names must not grow the node's metrics without bound)."""
OTHER_DESTINATION = "other"
_destinations: dict[str, set[str]] = {}


def egress_destination(actor: str, destination: str) -> str:
    """The ``destination`` label of ``actor``'s egress series: ``destination`` itself among its
    first ``MAX_DESTINATIONS_PER_ACTOR``, else ``OTHER_DESTINATION``."""
    seen = _destinations.setdefault(actor, set())
    if destination in seen or len(seen) < MAX_DESTINATIONS_PER_ACTOR:
        seen.add(destination)
        return destination
    return OTHER_DESTINATION


def egress_rule(rule: str) -> str:
    """The ``rule`` label of a denial: its kind, without the destination some rules name
    (``no rule allows <host> port <port>`` counts as ``no rule allows``)."""
    return "no rule allows" if rule.startswith("no rule allows ") else rule


def observe_egress(actor: str, destination: str, sent: int, received: int) -> None:
    """Counts one request (or tunnel) let through and its bytes (``sent`` by the actor)."""
    destination = egress_destination(actor, destination)
    EGRESS_REQUESTS.labels(actor, destination).inc()
    EGRESS_BYTES.labels(actor, destination, "sent").inc(max(sent, 0))
    EGRESS_BYTES.labels(actor, destination, "received").inc(max(received, 0))


def observe_egress_denied(actor: str, destination: str, rule: str) -> None:
    """Counts one refused connection or request (labels: ``egress_destination``, ``egress_rule``)."""
    EGRESS_DENIED.labels(actor, egress_destination(actor, destination), egress_rule(rule)).inc()


def observe_egress_cut(actor: str, count: int) -> None:
    """Counts ``count`` outbound connections cut for a checkpoint of ``actor``."""
    EGRESS_CUT.labels(actor).inc(count)


def observe_freeze(action: str, method: str, seconds: float) -> None:
    """Observes one freeze or thaw (``action``) done by ``method`` that took ``seconds``."""
    FREEZE_DURATION.labels(action, method).observe(seconds)


def set_frozen(pools_frozen: Iterable[tuple[str, bool]]) -> None:
    """Sets the frozen sandboxes' gauge from (pool, frozen) pairs, one per worker."""
    counts: dict[str, int] = {}
    for pool, frozen in pools_frozen:
        counts[pool] = counts.get(pool, 0) + int(frozen)
    for pool, count in counts.items():
        FROZEN.labels(pool).set(count)


def observe_cache(hit: bool, held_bytes: int) -> None:
    """Counts one restore from object storage (a cache hit or a download) and the cache's size."""
    CACHE.labels("hit" if hit else "miss").inc()
    CACHE_BYTES.set(held_bytes)


def observe(operation: str, outcome: str, seconds: float) -> None:
    """Counts one finished operation and its duration."""
    OPERATIONS.labels(operation, outcome).inc()
    DURATION.labels(operation, outcome).observe(seconds)


def set_workers(pools_states: Iterable[tuple[str, str]]) -> None:
    """Sets the worker gauge from (pool, state) pairs, one per worker."""
    counts: dict[tuple[str, str], int] = {}
    pools = set()
    for pool, state in pools_states:
        pools.add(pool)
        counts[(pool, state)] = counts.get((pool, state), 0) + 1
    for pool in pools:
        for state in STATES:
            WORKERS.labels(pool, state).set(counts.get((pool, state), 0))


def serve(listen: str) -> int | None:
    """Starts the HTTP endpoint on ``host:port`` (port 0 = any); returns the port, None if disabled."""
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0")
    return int(server.server_address[1])
