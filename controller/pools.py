"""WorkerPool → Deployment: the reconciler of `ate controller`.

For each WorkerPool: parse it (`domain.pools`); apply its Deployment (`controller.deployments`)
by server-side apply under the field manager `ate-controller`, so a user's own edits to fields
the controller does not set survive, and applying an unchanged pool writes nothing; then write
the pool's status (replicas and ready replicas of its Deployment, the selector the scale
subresource reports, and a Ready condition with its reason) when it changed. A pool that does
not parse gets condition Ready=False with reason InvalidSpec and the error, and no Deployment.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import AppsV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from controller.deployments import worker_deployment
from controller.labels import FIELD_MANAGER, POOL_LABEL, deployment_name
from controller.settings import ControllerSettings
from domain.pools import API_GROUP, PoolError, WorkerPoolSpec, parse_worker_pool

log = logging.getLogger(__name__)

VERSION = "v1alpha1"
PLURAL = "workerpools"


def parse(obj: dict[str, Any]) -> WorkerPoolSpec:
    """The WorkerPoolSpec of a WorkerPool object (its namespace kept).

    Raises:
        PoolError: the spec is invalid (the CRD's schema lets through what it cannot check).
    """
    meta = obj.get("metadata") or {}
    return parse_worker_pool(obj, f"WorkerPool {meta.get('namespace')}/{meta.get('name')}")


def condition(ready: bool, reason: str, message: str, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Ready condition, keeping its lastTransitionTime while its status does not change."""
    status = "True" if ready else "False"
    old = next((c for c in previous if c.get("type") == "Ready"), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    when = since or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [{"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": when}]


class PoolReconciler:
    """Applies Deployments and writes WorkerPool status.

    Args:
        apps: the client for Deployments.
        custom: the client for WorkerPools.
        settings: the image, API address and service account of the worker pods.
    """

    def __init__(self, apps: AppsV1Api, custom: CustomObjectsApi, settings: ControllerSettings) -> None:
        self.apps = apps
        self.custom = custom
        self.settings = settings
        self.applied = 0
        self.status_writes = 0

    def reconcile(self, obj: dict[str, Any]) -> WorkerPoolSpec | None:
        """Bring one WorkerPool's Deployment and status in line with its spec. Returns its spec
        (None when it does not parse). Blocking (the client is synchronous)."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        previous = (obj.get("status") or {}).get("conditions") or []
        try:
            pool = parse(obj)
        except PoolError as error:
            log.warning("WorkerPool %s/%s is invalid: %s", namespace, name, error)
            self._write_status(obj, {"conditions": condition(False, "InvalidSpec", str(error), previous)})
            return None
        desired = worker_deployment(
            pool,
            meta["uid"],
            image=self.settings.image,
            api_server=self.settings.api_server,
            service_account=self.settings.worker_service_account,
            images_claim=self.settings.images_claim,
            tls_issuer=self.settings.worker_tls_issuer,
            tls_issuer_kind=self.settings.worker_tls_issuer_kind,
            object_store_locations=self.settings.object_store_locations,
            worker_subnet=self.settings.worker_subnet,
        )
        deployment = self.apps.patch_namespaced_deployment(
            deployment_name(name),
            namespace,
            desired,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        self.applied += 1
        self.write_status(obj, deployment.status)
        return pool

    def write_status(self, obj: dict[str, Any], deployment_status: Any) -> None:
        """The pool's status from its Deployment's (written only when it changed)."""
        meta = obj["metadata"]
        replicas = int(getattr(deployment_status, "replicas", None) or 0)
        ready = int(getattr(deployment_status, "ready_replicas", None) or 0)
        desired = int((obj.get("spec") or {}).get("replicas") or 0)
        previous = (obj.get("status") or {}).get("conditions") or []
        if ready >= desired:
            conditions = condition(True, "WorkersReady", f"{ready} of {desired} worker pods are ready", previous)
        else:
            conditions = condition(False, "WorkersNotReady", f"{ready} of {desired} worker pods are ready", previous)
        self._write_status(
            obj,
            {
                "replicas": replicas,
                "readyReplicas": ready,
                "selector": f"{POOL_LABEL}={meta['name']}",
                "observedGeneration": meta.get("generation"),
                "conditions": conditions,
            },
        )

    def _write_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        meta = obj["metadata"]
        try:
            self.custom.patch_namespaced_custom_object_status(
                API_GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": status}
            )
            self.status_writes += 1
        except ApiException as error:
            if error.status != 404:  # a pool deleted meanwhile has no status to write
                raise
