"""The Deployment of a WorkerPool's worker pods, as the controller applies it (pure: no I/O).

How a worker pod hosts its gVisor sandbox (docs/kubernetes.md says why):
- one atelet and one worker per pod: the atelet's node is the pod (its name, from the downward
  API), so registration, heartbeats, drains and fencing work as they do under `ate dev`;
- the worker has its own network namespace and address inside the pod (gVisor cannot checkpoint
  with `--network=host`), and the atelet forwards the pod IP's TCP ports but its own into it
  (`--advertise-worker-ip`), so the router reaches actors at the pod IP;
- the pod runs privileged: runsc needs to create mount and network namespaces, set up veths and
  NAT, and (ptrace platform) trace the sandbox's processes, which no narrower set of capabilities
  allows under the default seccomp and AppArmor profiles; the pod gets no service account token;
- local snapshots (pause, async suspend) and the snapshot cache live in emptyDirs: they last as
  long as the pod, which is as long as its node (the ate node is the pod) can be pinned to;
- the atelet's certificate (mutual TLS, and its proof of identity to the API) comes from
  cert-manager's csi-driver: an inline volume asks the issuer for a certificate of CN and SAN DNS
  name = the pod's name (the node's), renewed in place, its key never leaving the node;
- the egress proxy's CA comes from the optional Secret ``ate-egress-ca`` (``EGRESS_CA_DIR``).
"""

from __future__ import annotations

import json
from typing import Any

from controller.labels import ATELET_METRICS_PORT, ATELET_PORT, MANAGED_BY, POOL_LABEL, deployment_name
from domain.pools import API_VERSION, KIND, WorkerPoolSpec

TLS_DIR = "/var/run/ate/tls"
"""Where the csi-driver volume puts the worker pod's tls.crt, tls.key and ca.crt."""

EGRESS_CA_DIR = "/var/run/ate/egress-ca"
"""Where the Secret ``ate-egress-ca`` (tls.crt, tls.key: the egress CA, components/cert-manager)
is mounted in worker pods, for the atelet's egress proxy (docs/security.md, "Egress"). The Secret
is optional: without it the proxy does not run and actors have no egress."""

EGRESS_CA_SECRET = "ate-egress-ca"
"""The Secret of the egress CA, the same for every worker pod (a restored actor keeps its trust)."""

TERMINATION_GRACE_SECONDS = 1800
"""How long a worker pod being evicted has to suspend its actor: the eviction deadline's default."""


def pool_document(pool: WorkerPoolSpec) -> dict[str, Any]:
    """The WorkerPool document one worker pod's atelet reads (its pool, with one replica)."""
    capacity: dict[str, Any] = {"places": pool.places, "cpu": f"{pool.cpu_millis}m", "memory": str(pool.memory_bytes)}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": pool.name, "labels": dict(pool.labels)},
        "spec": {"replicas": 1, "sandboxClass": pool.sandbox_class, "capacity": capacity},
    }


def node_certificate_volume(issuer: str, issuer_kind: str) -> dict[str, Any]:
    """The csi.cert-manager.io volume source of a worker pod's node certificate.

    CN and SAN DNS name `${POD_NAME}` (csi-driver fills in the pod's name: the atelet's node), usages
    server auth (the atelet's gRPC server) and client auth, files tls.crt, tls.key, ca.crt.
    """
    return {
        "driver": "csi.cert-manager.io",
        "readOnly": True,
        "volumeAttributes": {
            "csi.cert-manager.io/issuer-name": issuer,
            "csi.cert-manager.io/issuer-kind": issuer_kind,
            "csi.cert-manager.io/common-name": "${POD_NAME}",
            "csi.cert-manager.io/dns-names": "${POD_NAME}",
            "csi.cert-manager.io/key-usages": "digital signature,key encipherment,server auth,client auth",
        },
    }


def worker_deployment(
    pool: WorkerPoolSpec,
    owner_uid: str,
    *,
    image: str,
    api_server: str,
    service_account: str,
    images_claim: str = "ate-images",
    tls_issuer: str = "ate-ca",
    tls_issuer_kind: str = "Issuer",
    object_store_locations: list[str] | None = None,
    worker_subnet: str = "",
) -> dict[str, Any]:
    """The Deployment (apps/v1, as a dict ready for server-side apply) of `pool`'s worker pods.

    Args:
        owner_uid: the WorkerPool's UID: the Deployment's controller owner reference, so deleting
            the pool deletes its Deployment (garbage collection).
        image: the ate image.
        api_server: the REST API the atelets register with.
        service_account: the worker pods' service account (no API access needed).
        images_claim: the PersistentVolumeClaim holding the OCI image layouts templates name
            (`oci:<path>:<tag>`, relative to it), mounted read-only in every worker pod.
        tls_issuer / tls_issuer_kind: the cert-manager issuer (`Issuer` in the pool's namespace
            or `ClusterIssuer`) of the worker pods' node certificates: the CA the control
            plane's client certificate comes from too.
        object_store_locations: the object storage locations the atelets read and write
            (their credentials come from the optional Secret `ate-object-store`).
        worker_subnet: the IPv4 network of the worker's link inside each pod ("": the atelet's
            default); choose one the cluster's pod and service networks do not use.
    """
    selector = {POOL_LABEL: pool.name}
    pod_labels = {**MANAGED_BY, **selector, "app.kubernetes.io/name": "ate-worker", "ate.dev/sandbox-class": pool.sandbox_class}
    resources: dict[str, Any] = {}
    if pool.pod.requests:
        resources["requests"] = dict(pool.pod.requests)
    if pool.pod.limits:
        resources["limits"] = dict(pool.pod.limits)
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "ATE_ATELET_NODE", "value": "$(POD_NAME)"},
        {"name": "ATE_ATELET_LISTEN", "value": f"0.0.0.0:{ATELET_PORT}"},
        {"name": "ATE_ATELET_ADVERTISE_ADDRESS", "value": f"$(POD_IP):{ATELET_PORT}"},
        {"name": "ATE_ATELET_ADVERTISE_WORKER_IP", "value": "$(POD_IP)"},
        {"name": "ATE_ATELET_METRICS_LISTEN", "value": f"0.0.0.0:{ATELET_METRICS_PORT}"},
        {"name": "ATE_ATELET_API_SERVER", "value": api_server},
        {"name": "ATE_ATELET_POOL_DOCUMENT", "value": json.dumps(pool_document(pool), sort_keys=True)},
        {"name": "ATE_ATELET_STATE_DIR", "value": "/var/lib/ate/state"},
        {"name": "ATE_ATELET_LOCAL_SNAPSHOT_ROOT", "value": "/var/lib/ate/local-snapshots"},
        {"name": "ATE_ATELET_SNAPSHOT_CACHE_DIR", "value": "/var/lib/ate/snapshot-cache"},
        {"name": "ATE_ATELET_IMAGE_ROOTS", "value": '["/var/lib/ate/images"]'},
        {"name": "ATE_ATELET_DRAIN_ON_SIGTERM", "value": "true"},
        {"name": "ATE_ATELET_DRAIN_DEADLINE_SECONDS", "value": str(TERMINATION_GRACE_SECONDS - 30)},
        {"name": "ATE_ATELET_TLS_CERT", "value": f"{TLS_DIR}/tls.crt"},
        {"name": "ATE_ATELET_TLS_KEY", "value": f"{TLS_DIR}/tls.key"},
        {"name": "ATE_ATELET_TLS_CA", "value": f"{TLS_DIR}/ca.crt"},
        {"name": "ATE_ATELET_EGRESS_CA_CERT_FILE", "value": f"{EGRESS_CA_DIR}/tls.crt"},
        {"name": "ATE_ATELET_EGRESS_CA_KEY_FILE", "value": f"{EGRESS_CA_DIR}/tls.key"},
    ]
    if object_store_locations:
        env.append({"name": "ATE_ATELET_OBJECT_STORE_LOCATIONS", "value": json.dumps(object_store_locations)})
    if worker_subnet:
        env.append({"name": "ATE_ATELET_SUBNET", "value": worker_subnet})
    container: dict[str, Any] = {
        "name": "atelet",
        "image": image,
        "args": ["atelet"],
        "env": env,
        "envFrom": [{"secretRef": {"name": "ate-object-store", "optional": True}}],
        "ports": [
            {"name": "grpc", "containerPort": ATELET_PORT},
            {"name": "metrics", "containerPort": ATELET_METRICS_PORT},
        ],
        "readinessProbe": {"tcpSocket": {"port": ATELET_PORT}, "periodSeconds": 5},
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "state", "mountPath": "/var/lib/ate/state"},
            {"name": "local-snapshots", "mountPath": "/var/lib/ate/local-snapshots"},
            {"name": "snapshot-cache", "mountPath": "/var/lib/ate/snapshot-cache"},
            {"name": "images", "mountPath": "/var/lib/ate/images", "readOnly": True},
            {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
            {"name": "egress-ca", "mountPath": EGRESS_CA_DIR, "readOnly": True},
        ],
    }
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "containers": [container],
        "volumes": [
            {"name": "state", "emptyDir": {}},
            {"name": "local-snapshots", "emptyDir": {}},
            {"name": "snapshot-cache", "emptyDir": {}},
            {"name": "images", "persistentVolumeClaim": {"claimName": images_claim, "readOnly": True}},
            {"name": "tls", "csi": node_certificate_volume(tls_issuer, tls_issuer_kind)},
            {"name": "egress-ca", "secret": {"secretName": EGRESS_CA_SECRET, "optional": True,
                                              "items": [{"key": "tls.crt", "path": "tls.crt"},
                                                        {"key": "tls.key", "path": "tls.key"}]}},
        ],
    }
    if pool.pod.node_selector:
        pod_spec["nodeSelector"] = dict(pool.pod.node_selector)
    if pool.pod.tolerations:
        pod_spec["tolerations"] = list(pool.pod.tolerations)
    if pool.pod.affinity:
        pod_spec["affinity"] = dict(pool.pod.affinity)
    if pool.pod.priority_class_name:
        pod_spec["priorityClassName"] = pool.pod.priority_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(pool.name),
            "namespace": pool.namespace,
            "labels": {**MANAGED_BY, **selector},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": pool.name,
                    "uid": owner_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": pool.replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
