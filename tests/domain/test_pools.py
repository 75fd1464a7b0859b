"""The WorkerPool shape the CRD and `ate dev --pool` share (domain.pools)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.pools import PoolError, parse_worker_pool


def pool(spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "ate.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": "gpu", "namespace": "ate-system", "labels": labels or {}},
        "spec": spec,
    }


def test_capacity_comes_from_the_pod_limits_when_not_given() -> None:
    parsed = parse_worker_pool(pool(
        {"replicas": 3, "template": {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                                   "limits": {"cpu": "2", "memory": "4Gi"}}}},
        {"gpu": "true"},
    ))  # fmt: skip
    assert (parsed.cpu_millis, parsed.memory_bytes, parsed.places) == (2000, 4 * 2**30, 1)
    assert parsed.labels == {"gpu": "true"} and parsed.namespace == "ate-system"
    assert parsed.pod.requests == {"cpu": "500m", "memory": "512Mi"}


def test_the_scheduling_fields_pass_through() -> None:
    template = {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "ate.dev/workers", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "priorityClassName": "ate-workers",
    }
    parsed = parse_worker_pool(pool({"replicas": 1, "template": template}))
    assert parsed.pod.node_selector == template["nodeSelector"]
    assert parsed.pod.tolerations == template["tolerations"]
    assert parsed.pod.affinity == template["affinity"]
    assert parsed.pod.priority_class_name == "ate-workers"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"capacity": {"cpu": "4"}, "template": {"resources": {"limits": {"cpu": "2"}}}},
         "spec.capacity.cpu 4 exceeds spec.template.resources.limits.cpu 2"),
        ({"template": {"resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "1Gi"}}}},
         "spec.template.resources.requests.memory 4Gi exceeds its limit 1Gi"),
        ({"template": {"image": "x"}}, "unknown field 'image'"),
        ({"template": {"resources": {"limits": {"cpu": "lots"}}}}, "spec.template.resources.limits.cpu"),
        ({"labels": {"a": "b"}}, "spec.labels: a pool's labels are its metadata.labels"),
        ({"capacity": {"places": 4}}, "pool 'gpu': spec.capacity.places must be 1, got 4: a worker is one sandbox with one address and hosts one actor at a time; for more actors at once, run more workers (a pool's spec.replicas)"),
        ({"capacity": {"places": 0}}, "pool 'gpu': spec.capacity.places must be 1, got 0"),
    ],
)  # fmt: skip
def test_a_bad_pool_names_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolError) as err:
        parse_worker_pool(pool(spec))
    assert message in str(err.value)


def test_a_pool_spec_with_more_than_one_place_cannot_be_made() -> None:
    """No half state: code that builds a spec by hand is held to one place as the parser is."""
    from domain.pools import WorkerPoolSpec

    assert WorkerPoolSpec(name="p", replicas=1).places == 1
    with pytest.raises(PoolError, match=r"pool 'p': spec\.capacity\.places must be 1, got 2"):
        WorkerPoolSpec(name="p", replicas=1, places=2)
