"""Worker-pool YAML validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from atelet.pool import PoolError, load_pools

GOOD = """\
apiVersion: ate.dev/v1alpha1
kind: WorkerPool
metadata: {name: default, labels: {}}
spec:
  replicas: 2
  sandboxClass: gvisor
  capacity: {places: 1, cpu: "2", memory: 2Gi}
---
apiVersion: ate.dev/v1alpha1
kind: WorkerPool
metadata: {name: big, labels: {tier: big}}
spec:
  replicas: 1
  capacity: {cpu: 1500m, memory: 512Mi}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    return path


def test_loads_several_pools(tmp_path: Path) -> None:
    default, big = load_pools(write(tmp_path, GOOD))
    assert (default.name, default.replicas, default.cpu_millis, default.memory_bytes) == ("default", 2, 2000, 2 << 30)
    assert (big.name, big.places, big.cpu_millis, big.memory_bytes, big.labels) == (
        "big", 1, 1500, 512 << 20, {"tier": "big"})
    assert big.sandbox_class == "gvisor"


@pytest.mark.parametrize(("old", "new", "field"), [
    ("replicas: 2", "replicas: -1", "spec.replicas"),
    ("replicas: 2", "replicas: two", "spec.replicas"),
    ("sandboxClass: gvisor", "sandboxClass: docker", "spec.sandboxClass"),
    ('cpu: "2"', "cpu: lots", "spec.capacity.cpu"),
    ("memory: 2Gi", "memory: 2GB", "spec.capacity.memory"),
    ("places: 1", "places: 0", "spec.capacity.places"),
    ("places: 1", "places: 4", "spec.capacity.places must be 1"),
    ("{name: default,", "{name: Default_Pool,", "metadata.name"),
    ("{name: big,", "{name: default,", "metadata.name"),
    ("kind: WorkerPool\nmetadata: {name: default", "kind: Pool\nmetadata: {name: default", "kind"),
    ("apiVersion: ate.dev/v1alpha1\nkind: WorkerPool\nmetadata: {name: big",
     "apiVersion: v1\nkind: WorkerPool\nmetadata: {name: big", "apiVersion"),
    ("labels: {tier: big}", "labels: {tier: 3}", "metadata.labels"),
    ("replicas: 1\n", "replicas: 1\n  labels: {tier: big}\n", "spec.labels"),
])
def test_errors_name_the_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert old in GOOD
    with pytest.raises(PoolError, match=field.replace(".", r"\.")):
        load_pools(write(tmp_path, GOOD.replace(old, new, 1)))


def test_empty_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(PoolError, match="no WorkerPool"):
        load_pools(write(tmp_path, "\n"))
    with pytest.raises(PoolError, match="invalid YAML"):
        load_pools(write(tmp_path, "spec: [unclosed"))
    with pytest.raises(PoolError, match="pool file"):
        load_pools(tmp_path / "missing.yaml")
