"""A worker pool's spec as a type: the shape of the WorkerPool custom resource
(`ate.dev/v1alpha1`), which a local YAML file for `ate dev --pool` shares::

    apiVersion: ate.dev/v1alpha1
    kind: WorkerPool
    metadata: {name: default}
    spec:
      replicas: 2
      sandboxClass: gvisor
      labels: {}
      capacity: {places: 1, cpu: "2", memory: 2Gi}

`parse_worker_pool` validates one document (already parsed from YAML or JSON) and raises
`PoolError` naming the document and the field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.labels import DNS_LABEL, check_labels
from domain.quantities import parse_cpu_millis, parse_memory_bytes

API_VERSION = "ate.dev/v1alpha1"
KIND = "WorkerPool"
SANDBOX_CLASSES = ("gvisor", "microvm")


class PoolError(ValueError):
    """A worker pool document is malformed; the message names the document and the field."""


@dataclass(frozen=True)
class WorkerPoolSpec:
    """One worker pool: `replicas` identical workers of `sandbox_class` carrying `labels`.

    Per worker: `places` actors at once, `cpu_millis` of CPU (millicores) and `memory_bytes` of
    memory (bytes) that placement hands out.
    """

    name: str
    replicas: int
    sandbox_class: str = "gvisor"
    labels: dict[str, str] = field(default_factory=dict)
    places: int = 1
    cpu_millis: int = 2000
    memory_bytes: int = 2 * 2**30


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PoolError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _count(value: Any, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PoolError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_worker_pool(doc: Any, where: str = "pool") -> WorkerPoolSpec:
    """Validate one WorkerPool document into a WorkerPoolSpec.

    Args:
        doc: the parsed document (see the module docstring for its shape).
        where: how error messages name the document, e.g. "pool file pools.yaml, document 2".

    Raises:
        PoolError: a field is missing or malformed; the message names it (e.g. `pool 'big':
            spec.replicas must be an integer >= 0, got -1`).
    """
    doc = _mapping(doc, where)
    if doc.get("apiVersion") != API_VERSION:
        raise PoolError(f"{where}: apiVersion must be {API_VERSION!r}, got {doc.get('apiVersion')!r}")
    if doc.get("kind") != KIND:
        raise PoolError(f"{where}: kind must be {KIND!r}, got {doc.get('kind')!r}")
    name = _mapping(doc.get("metadata"), f"{where}: metadata").get("name")
    if not isinstance(name, str) or not DNS_LABEL.match(name):
        raise PoolError(f"{where}: metadata.name must be a DNS-1123 label, got {name!r}")
    where = f"pool {name!r}"
    spec = _mapping(doc.get("spec"), f"{where}: spec")
    replicas = _count(spec.get("replicas", 1), f"{where}: spec.replicas", 0)
    sandbox_class = spec.get("sandboxClass", "gvisor")
    if sandbox_class not in SANDBOX_CLASSES:
        raise PoolError(f"{where}: spec.sandboxClass must be one of {SANDBOX_CLASSES}, got {sandbox_class!r}")
    try:
        labels = check_labels(spec.get("labels") or {})
    except ValueError as error:
        raise PoolError(f"{where}: spec.labels: {error}") from None
    capacity = _mapping(spec.get("capacity"), f"{where}: spec.capacity")
    places = _count(capacity.get("places", 1), f"{where}: spec.capacity.places", 1)
    try:
        cpu_millis = parse_cpu_millis(capacity.get("cpu", "2"))
    except ValueError as error:
        raise PoolError(f"{where}: spec.capacity.cpu: {error}") from None
    try:
        memory_bytes = parse_memory_bytes(capacity.get("memory", "2Gi"))
    except ValueError as error:
        raise PoolError(f"{where}: spec.capacity.memory: {error}") from None
    return WorkerPoolSpec(
        name=name,
        replicas=replicas,
        sandbox_class=sandbox_class,
        labels=labels,
        places=places,
        cpu_millis=cpu_millis,
        memory_bytes=memory_bytes,
    )
