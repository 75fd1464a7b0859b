"""WorkerPool → Deployment on a real kube-apiserver (with kube-controller-manager for ReplicaSets
and garbage collection): the CRD's own validation, server-side apply that leaves a user's edits
alone and writes nothing when nothing changed, the scale subresource, deletion by garbage
collection, and the pool's status."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.labels import POOL_LABEL, deployment_name
from controller.pools import PLURAL, VERSION, PoolReconciler
from controller.settings import ControllerSettings

pytestmark = pytest.mark.kubernetes

GROUP = "ate.dev"


def workerpool(name: str, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ate.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": name, "labels": {"tier": "general"}},
        "spec": {"replicas": replicas, "sandboxClass": "gvisor", **spec},
    }


def until(check: Callable[[], Any], seconds: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {seconds:g} s: {what or check.__name__}")
        time.sleep(0.1)


def test_the_crd_refuses_a_bad_pool_with_the_api_servers_own_message(kube: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube)
    with pytest.raises(ApiException) as negative:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, workerpool("neg", replicas=-1))
    assert negative.value.status == 422
    body = json.loads(negative.value.body)
    assert (
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        in body["message"]
    )
    with pytest.raises(ApiException) as docker:
        pool = workerpool("docker")
        pool["spec"]["sandboxClass"] = "docker"
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, pool)
    assert docker.value.status == 422
    assert (
        'spec.sandboxClass: Unsupported value: "docker": supported values: "gvisor", "microvm"'
        in json.loads(docker.value.body)["message"]
    )
    with pytest.raises(ApiException) as quantity:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, workerpool("cpu", capacity={"cpu": "lots"})
        )
    assert quantity.value.status == 422 and "spec.capacity.cpu" in json.loads(quantity.value.body)["message"]


def test_a_pool_becomes_a_deployment_that_follows_it(kube: client.ApiClient, namespace: str) -> None:
    custom, apps = client.CustomObjectsApi(kube), client.AppsV1Api(kube)
    reconciler = PoolReconciler(apps, custom, ControllerSettings(image="ate:test", api_server="http://api:8080"))
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, workerpool("general"))
    reconciler.reconcile(created)
    deployment = apps.read_namespaced_deployment(deployment_name("general"), namespace)
    assert deployment.spec.replicas == 2
    assert deployment.spec.selector.match_labels == {POOL_LABEL: "general"}
    [owner] = deployment.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "WorkerPool",
        "general",
        created["metadata"]["uid"],
        True,
    )
    [container] = deployment.spec.template.spec.containers
    env = {e.name: e.value for e in container.env if e.value is not None}
    assert env["ATE_ATELET_API_SERVER"] == "http://api:8080" and container.image == "ate:test"
    document = json.loads(env["ATE_ATELET_POOL_DOCUMENT"])
    assert document["metadata"]["labels"] == {"tier": "general"} and document["spec"]["replicas"] == 1
    # the node certificate: from cert-manager's csi-driver, CN and SAN DNS name = the pod's name (its node)
    [tls] = [v for v in deployment.spec.template.spec.volumes if v.name == "tls"]
    assert tls.csi.driver == "csi.cert-manager.io" and tls.csi.read_only
    assert {k.removeprefix("csi.cert-manager.io/"): v for k, v in tls.csi.volume_attributes.items()} == {
        "issuer-name": "ate-ca", "issuer-kind": "Issuer", "common-name": "${POD_NAME}", "dns-names": "${POD_NAME}",
        "key-usages": "digital signature,key encipherment,server auth,client auth",
    }  # fmt: skip
    [mount] = [m for m in container.volume_mounts if m.name == "tls"]
    assert (mount.mount_path, mount.read_only) == ("/var/run/ate/tls", True)
    assert [env[f"ATE_ATELET_TLS_{part}"] for part in ("CERT", "KEY", "CA")] == [
        "/var/run/ate/tls/tls.crt", "/var/run/ate/tls/tls.key", "/var/run/ate/tls/ca.crt",
    ]  # fmt: skip
    # the egress CA: the optional Secret ate-egress-ca (without it the node runs no egress proxy)
    [egress_ca] = [v for v in deployment.spec.template.spec.volumes if v.name == "egress-ca"]
    assert (egress_ca.secret.secret_name, egress_ca.secret.optional) == ("ate-egress-ca", True)
    [mount] = [m for m in container.volume_mounts if m.name == "egress-ca"]
    assert (mount.mount_path, mount.read_only) == ("/var/run/ate/egress-ca", True)
    assert [env[f"ATE_ATELET_EGRESS_CA_{part}_FILE"] for part in ("CERT", "KEY")] == [
        "/var/run/ate/egress-ca/tls.crt", "/var/run/ate/egress-ca/tls.key"]  # fmt: skip
    assert env["ATE_ATELET_NODE"] == "$(POD_NAME)"
    assert "ATE_ATELET_OBJECT_STORE_LOCATIONS" not in env and "ATE_ATELET_SUBNET" not in env  # the atelet's defaults
    assert any(m.manager == "ate-controller" and m.operation == "Apply" for m in deployment.metadata.managed_fields)

    # re-applying an unchanged pool writes nothing: no new generation, and the controller's own
    # managed-fields entry keeps its time (the Deployment's status, kept by kube-controller-manager,
    # may change meanwhile, so the resourceVersion says nothing about our apply)
    def applied(dep: client.V1Deployment) -> tuple[int, object]:
        [mine] = [m for m in dep.metadata.managed_fields if m.manager == "ate-controller"]
        return dep.metadata.generation, mine.time

    configured = PoolReconciler(
        apps,
        custom,
        ControllerSettings(
            image="ate:test",
            api_server="http://api:8080",
            object_store_locations=["s3://b/p"],
            worker_subnet="10.250.0.0/16",
        ),
    )
    configured.reconcile(
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, workerpool("stored"))
    )
    [stored] = apps.read_namespaced_deployment(deployment_name("stored"), namespace).spec.template.spec.containers
    stored_env = {e.name: e.value for e in stored.env if e.value is not None}
    assert stored_env["ATE_ATELET_OBJECT_STORE_LOCATIONS"] == '["s3://b/p"]'
    assert stored_env["ATE_ATELET_SUBNET"] == "10.250.0.0/16"

    before = applied(deployment)
    time.sleep(1.1)  # managed-fields times have a resolution of one second
    reconciler.reconcile(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "general"))
    assert applied(apps.read_namespaced_deployment(deployment_name("general"), namespace)) == before

    # a user's own edit of a field the controller does not set survives a reconcile
    apps.patch_namespaced_deployment(
        deployment_name("general"), namespace, {"metadata": {"annotations": {"team/owner": "platform"}}}
    )
    # the scale subresource (what an HPA uses) and an edit of the spec both reach the Deployment
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "general", {"spec": {"replicas": 3}})
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "general",
        {"spec": {"template": {"nodeSelector": {"kubernetes.io/os": "linux"}}}},
    )  # fmt: skip
    reconciler.reconcile(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "general"))
    deployment = apps.read_namespaced_deployment(deployment_name("general"), namespace)
    assert deployment.spec.replicas == 3
    assert deployment.spec.template.spec.node_selector == {"kubernetes.io/os": "linux"}
    assert deployment.metadata.annotations["team/owner"] == "platform"

    # the pool's status: what the Deployment has (its pods never become Ready without a kubelet,
    # so a rollout may hold old and new pods at once), and the selector the scale subresource reports
    def counted() -> dict[str, Any] | None:
        pool = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "general")
        dep = apps.read_namespaced_deployment(deployment_name("general"), namespace)
        if not dep.status.replicas:
            return None
        reconciler.write_status(pool, dep.status)
        pool = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "general")
        return pool if (pool.get("status") or {}).get("replicas") == dep.status.replicas else None

    pool = until(counted)
    assert pool["status"]["readyReplicas"] == 0 and pool["status"]["selector"] == f"{POOL_LABEL}=general"
    [ready] = pool["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "WorkersNotReady")
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "general")
    assert scale["spec"]["replicas"] == 3 and scale["status"]["selector"] == f"{POOL_LABEL}=general"

    # deleting the pool takes its Deployment with it (garbage collection by the owner reference)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "general")

    def gone() -> bool:
        try:
            apps.read_namespaced_deployment(deployment_name("general"), namespace)
        except ApiException as error:
            return error.status == 404
        return False

    until(gone, 60)


def test_a_pool_the_schema_lets_through_but_ate_refuses_gets_a_condition_and_no_deployment(
    kube: client.ApiClient, namespace: str
) -> None:
    custom, apps = client.CustomObjectsApi(kube), client.AppsV1Api(kube)
    reconciler = PoolReconciler(apps, custom, ControllerSettings())
    too_big = workerpool("big", capacity={"cpu": "4"}, template={"resources": {"limits": {"cpu": "2"}}})
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, too_big)
    assert reconciler.reconcile(created) is None
    pool = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "big")
    [ready] = pool["status"]["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.capacity.cpu 4 exceeds spec.template.resources.limits.cpu 2" in ready["message"]
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment(deployment_name("big"), namespace)
    assert missing.value.status == 404
