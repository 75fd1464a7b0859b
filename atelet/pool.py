"""Worker pools from a local YAML file of the WorkerPool CRD's shape.

One file may hold several YAML documents, one pool each::

    apiVersion: ate.dev/v1alpha1
    kind: WorkerPool
    metadata: {name: default}
    spec:
      replicas: 2
      sandboxClass: gvisor
      labels: {}
      capacity: {places: 1, cpu: "2", memory: 2Gi}

``load_pools`` raises ``PoolError`` with a message naming the document and field at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

API_VERSION = "ate.dev/v1alpha1"
SANDBOX_CLASSES = ("gvisor", "microvm")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MEMORY_UNITS = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}


class PoolError(ValueError):
    """A pool file is malformed; the message names the document and the field."""


@dataclass(frozen=True)
class PoolSpec:
    """One worker pool: ``replicas`` identical workers.

    ``cpu_millis`` is CPU capacity in millicores, ``memory_bytes`` memory capacity in bytes,
    ``places`` how many actors one worker can hold at once.
    """

    name: str
    replicas: int
    sandbox_class: str = "gvisor"
    labels: dict[str, str] = field(default_factory=dict)
    places: int = 1
    cpu_millis: int = 2000
    memory_bytes: int = 2 * 2**30


def parse_cpu(value: Any, where: str) -> int:
    """Parses a Kubernetes CPU quantity (``"2"``, ``0.5``, ``"500m"``) into millicores."""
    text = str(value).strip()
    try:
        millis = int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)
    except ValueError:
        raise PoolError(f"{where}: invalid cpu quantity {value!r} (use e.g. \"2\" or \"500m\")") from None
    if millis <= 0:
        raise PoolError(f"{where}: cpu must be positive, got {value!r}")
    return millis


def parse_memory(value: Any, where: str) -> int:
    """Parses a Kubernetes memory quantity (``"2Gi"``, ``"256Mi"``, ``1000000``) into bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kMGT]i?|)\s*", str(value))
    if not match:
        raise PoolError(f"{where}: invalid memory quantity {value!r} (use e.g. \"2Gi\" or \"256Mi\")")
    amount = int(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])
    if amount <= 0:
        raise PoolError(f"{where}: memory must be positive, got {value!r}")
    return amount


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PoolError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def parse_pool(doc: Any, where: str = "pool") -> PoolSpec:
    """Validates one WorkerPool document (already YAML-parsed) into a PoolSpec."""
    doc = _mapping(doc, where)
    if doc.get("apiVersion") != API_VERSION:
        raise PoolError(f"{where}: apiVersion must be {API_VERSION!r}, got {doc.get('apiVersion')!r}")
    if doc.get("kind") != "WorkerPool":
        raise PoolError(f"{where}: kind must be 'WorkerPool', got {doc.get('kind')!r}")
    name = _mapping(doc.get("metadata"), f"{where}: metadata").get("name")
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        raise PoolError(f"{where}: metadata.name must be a DNS-1123 label, got {name!r}")
    where = f"pool {name!r}"
    spec = _mapping(doc.get("spec"), f"{where}: spec")
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise PoolError(f"{where}: spec.replicas must be an integer >= 0, got {replicas!r}")
    sandbox_class = spec.get("sandboxClass", "gvisor")
    if sandbox_class not in SANDBOX_CLASSES:
        raise PoolError(f"{where}: spec.sandboxClass must be one of {SANDBOX_CLASSES}, got {sandbox_class!r}")
    labels = _mapping(spec.get("labels"), f"{where}: spec.labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise PoolError(f"{where}: spec.labels must map strings to strings, got {key!r}: {value!r}")
    capacity = _mapping(spec.get("capacity"), f"{where}: spec.capacity")
    places = capacity.get("places", 1)
    if not isinstance(places, int) or isinstance(places, bool) or places < 1:
        raise PoolError(f"{where}: spec.capacity.places must be an integer >= 1, got {places!r}")
    return PoolSpec(
        name=name,
        replicas=replicas,
        sandbox_class=sandbox_class,
        labels=dict(labels),
        places=places,
        cpu_millis=parse_cpu(capacity.get("cpu", "2"), f"{where}: spec.capacity.cpu"),
        memory_bytes=parse_memory(capacity.get("memory", "2Gi"), f"{where}: spec.capacity.memory"),
    )


def load_pools(path: Path) -> list[PoolSpec]:
    """Loads every WorkerPool document of ``path``; raises PoolError (unique names, >= 1 pool)."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except OSError as exc:
        raise PoolError(f"pool file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PoolError(f"pool file {path}: invalid YAML: {exc}") from None
    if not docs:
        raise PoolError(f"pool file {path}: holds no WorkerPool document")
    pools = [parse_pool(doc, f"pool file {path}, document {i + 1}") for i, doc in enumerate(docs)]
    names = [p.name for p in pools]
    for name in names:
        if names.count(name) > 1:
            raise PoolError(f"pool file {path}: metadata.name {name!r} appears more than once")
    return pools


def default_pool(workers: int) -> PoolSpec:
    """The pool used without a pool file: ``default``, ``workers`` gvisor workers."""
    return PoolSpec(name="default", replicas=workers)
