"""A real Kubernetes control plane (tests/kubernetes/cluster.py) for the whole session, with the
WorkerPool CRD applied from deploy/, and a fresh namespace per test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.kubernetes.cluster import REPO, Cluster, start_cluster

CRD = REPO / "deploy" / "base" / "workerpool-crd.yaml"


def admin_client(cluster: Cluster) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(Path(tmp_path_factory.mktemp("kube")))
    try:
        api = admin_client(running)
        extensions = client.ApiextensionsV1Api(api)
        extensions.create_custom_resource_definition(yaml.safe_load(CRD.read_text()))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            crd = extensions.read_custom_resource_definition("workerpools.ate.dev")
            if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
                break
            time.sleep(0.1)
        running.start_controller_manager()  # after the CRD: GC of WorkerPool owners is then quick
        yield running
    finally:
        running.stop()


@pytest.fixture
def kube(cluster: Cluster) -> client.ApiClient:
    return admin_client(cluster)


@pytest.fixture
def namespace(kube: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube).delete_namespace(name)
