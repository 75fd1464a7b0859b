"""A worker pool as a type: the WorkerPool custom resource (`ate.dev/v1alpha1`), which the local
YAML file of `ate dev --pool` shares, parsed by one function::

    apiVersion: ate.dev/v1alpha1
    kind: WorkerPool
    metadata:
      name: default
      labels: {tier: general}          # what templates and actors select (placement check 5)
    spec:
      replicas: 2
      sandboxClass: gvisor             # gvisor | microvm
      capacity: {places: 1, cpu: "2", memory: 2Gi}   # per worker, what placement hands out (places: 1 only)
      template:                        # Kubernetes only: the worker pods
        nodeSelector: {kubernetes.io/os: linux}
        tolerations: [...]
        affinity: {...}
        priorityClassName: ate-workers
        resources:
          requests: {cpu: 500m, memory: 512Mi}   # what the Kubernetes scheduler packs by
          limits: {cpu: "2", memory: 2Gi}        # what a worker may use

A worker is one sandbox with one address, so it hosts one actor at a time: `spec.capacity.places`
may be left out or set to 1, nothing else (more actors at once take more workers: `spec.replicas`).
A worker's capacity (cpu, memory) is `spec.capacity`, or when it is left out the pod's limits: a
worker never advertises more than its pod may use, and requests may be lower than limits so the
scheduler can pack nodes. `parse_worker_pool` validates one document (already parsed from YAML
or JSON) and raises `PoolError` naming the document and the field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.labels import DNS_LABEL, check_labels
from domain.quantities import WORKER_PLACES, check_worker_places, parse_cpu_millis, parse_memory_bytes

API_GROUP = "ate.dev"
API_VERSION = "ate.dev/v1alpha1"
KIND = "WorkerPool"
SANDBOX_CLASSES = ("gvisor", "microvm")
DEFAULT_CPU = "2"
DEFAULT_MEMORY = "2Gi"


class PoolError(ValueError):
    """A worker pool document is malformed; the message names the document and the field."""


@dataclass(frozen=True)
class PodTemplate:
    """What a pool's worker pods carry for the Kubernetes scheduler (passed through as written)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    affinity: dict[str, Any] = field(default_factory=dict)
    priority_class_name: str = ""
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerPoolSpec:
    """One worker pool: `replicas` identical workers of `sandbox_class` carrying `labels`.

    Per worker: `places` actors at once (always 1: `domain.quantities.WORKER_PLACES`), `cpu_millis`
    of CPU (millicores) and `memory_bytes` of memory (bytes) that placement hands out. `namespace`
    is the resource's (Kubernetes only).

    Raises:
        PoolError: `places` is not 1 (the worker could not honour it).
    """

    name: str
    replicas: int
    sandbox_class: str = "gvisor"
    labels: dict[str, str] = field(default_factory=dict)
    places: int = 1
    cpu_millis: int = 2000
    memory_bytes: int = 2 * 2**30
    namespace: str = ""
    pod: PodTemplate = field(default_factory=PodTemplate)

    def __post_init__(self) -> None:
        try:
            check_worker_places(self.places)
        except ValueError as error:
            raise PoolError(f"pool {self.name!r}: spec.capacity.places {error}") from None


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PoolError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _count(value: Any, where: str, minimum: int, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PoolError(f"{where} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise PoolError(f"{where} must be at most {maximum}, got {value!r}")
    return value


def _quantities(value: Any, where: str) -> dict[str, str]:
    """A `{cpu, memory}` resource map, checked (other resource names pass through)."""
    values = _mapping(value, where)
    for name, amount in values.items():
        try:
            if name == "cpu":
                parse_cpu_millis(amount)
            elif name == "memory":
                parse_memory_bytes(amount)
        except ValueError as error:
            raise PoolError(f"{where}.{name}: {error}") from None
    return {str(k): str(v) for k, v in values.items()}


def _pod_template(value: Any, where: str) -> PodTemplate:
    template = _mapping(value, where)
    unknown = set(template) - {"nodeSelector", "tolerations", "affinity", "priorityClassName", "resources"}
    if unknown:
        raise PoolError(
            f"{where}: unknown field {sorted(unknown)[0]!r} (allowed: nodeSelector, tolerations, affinity, "
            "priorityClassName, resources)"
        )
    tolerations = template.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise PoolError(f"{where}.tolerations: must be a list of tolerations")
    resources = _mapping(template.get("resources"), f"{where}.resources")
    requests = _quantities(resources.get("requests"), f"{where}.resources.requests")
    limits = _quantities(resources.get("limits"), f"{where}.resources.limits")
    for name, parse in (("cpu", parse_cpu_millis), ("memory", parse_memory_bytes)):
        if name in requests and name in limits and parse(requests[name]) > parse(limits[name]):
            raise PoolError(f"{where}.resources.requests.{name} {requests[name]} exceeds its limit {limits[name]}")
    try:
        node_selector = check_labels(template.get("nodeSelector") or {})
    except ValueError as error:
        raise PoolError(f"{where}.nodeSelector: {error}") from None
    priority = template.get("priorityClassName") or ""
    if not isinstance(priority, str):
        raise PoolError(f"{where}.priorityClassName: must be a string")
    return PodTemplate(
        node_selector=node_selector,
        tolerations=list(tolerations),
        affinity=dict(_mapping(template.get("affinity"), f"{where}.affinity")),
        priority_class_name=priority,
        requests=requests,
        limits=limits,
    )


def _capacity(capacity: dict[str, Any], limits: dict[str, str], where: str, name: str, parse: Any) -> int:
    """One dimension of a worker's capacity: spec.capacity, else the pod's limit, else the default;
    never above the pod's limit."""
    given = capacity.get(name)
    limit = limits.get(name)
    default = DEFAULT_CPU if name == "cpu" else DEFAULT_MEMORY
    try:
        amount: int = parse(given if given is not None else (limit if limit is not None else default))
    except ValueError as error:
        raise PoolError(f"{where}: spec.capacity.{name}: {error}") from None
    if limit is not None and amount > parse(limit):
        raise PoolError(
            f"{where}: spec.capacity.{name} {given} exceeds spec.template.resources.limits.{name} {limit}: a worker "
            "cannot hand out more than its pod may use"
        )
    return amount


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
    metadata = _mapping(doc.get("metadata"), f"{where}: metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not DNS_LABEL.fullmatch(name):
        raise PoolError(f"{where}: metadata.name must be a DNS-1123 label, got {name!r}")
    where = f"pool {name!r}"
    try:
        labels = check_labels(metadata.get("labels") or {})
    except ValueError as error:
        raise PoolError(f"{where}: metadata.labels: {error}") from None
    spec = _mapping(doc.get("spec"), f"{where}: spec")
    if "labels" in spec:
        raise PoolError(f"{where}: spec.labels: a pool's labels are its metadata.labels (move them there)")
    replicas = _count(spec.get("replicas", 1), f"{where}: spec.replicas", 0)
    sandbox_class = spec.get("sandboxClass", "gvisor")
    if sandbox_class not in SANDBOX_CLASSES:
        raise PoolError(f"{where}: spec.sandboxClass must be one of {SANDBOX_CLASSES}, got {sandbox_class!r}")
    capacity = _mapping(spec.get("capacity"), f"{where}: spec.capacity")
    try:
        places = check_worker_places(capacity.get("places", WORKER_PLACES))
    except ValueError as error:
        raise PoolError(f"{where}: spec.capacity.places {error}") from None
    pod = _pod_template(spec.get("template"), f"{where}: spec.template")
    return WorkerPoolSpec(
        name=name,
        replicas=replicas,
        sandbox_class=sandbox_class,
        labels=labels,
        places=places,
        cpu_millis=_capacity(capacity, pod.limits, where, "cpu", parse_cpu_millis),
        memory_bytes=_capacity(capacity, pod.limits, where, "memory", parse_memory_bytes),
        namespace=str(metadata.get("namespace") or ""),
        pod=pod,
    )
