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
    ],
)  # fmt: skip
def test_a_bad_pool_names_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolError) as err:
        parse_worker_pool(pool(spec))
    assert message in str(err.value)
