"""The pod syncer: what Kubernetes does to worker pods, told to the control plane.

A worker pod (label `ate.dev/pool`) hosts one atelet and one worker; its ate node is the pod.
- It has a PodIP: its worker record exists (pool, labels, class and capacity from its WorkerPool),
  ACTIVE while the pod is Ready and UNAVAILABLE while it is not.
- It is being deleted with a grace period (an eviction, a scale-down, a rollout:
  deletionTimestamp is set): its node is drained through the API (`POST /v1/nodes/{pod}/drain`,
  the EvictionDeadline workflow), so its actor is suspended, not lost; the deadline is the pod's
  grace period.
- It is gone: the actor that ran there (RUNNING, or UNREACHABLE waiting for it) is CRASHED, its
  memory gone; any other actor it hosted goes back to SUSPENDED with its last COMPLETED snapshot;
  the node is retired, and a late heartbeat of its atelet cannot bring it back.
The atelet's heartbeat and the syncer agree: whichever first says a worker is gone wins (a
silent atelet's actors are UNREACHABLE after the lease and CRASHED after the grace; a deleted
pod's are CRASHED at once: the node is known gone), and neither brings back a deleted worker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from controller.labels import ATELET_PORT, POOL_LABEL, worker_name
from domain.pools import WorkerPoolSpec
from store.interfaces import ControllerStore
from store.records import WorkerRegistration

log = logging.getLogger(__name__)

Drain = Callable[[str, float], Awaitable[None]]
"""Drain the node (pod) with a deadline in seconds."""


def ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pool_of(pod: dict[str, Any]) -> tuple[str, str]:
    """(namespace, WorkerPool name) of a worker pod."""
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str((meta.get("labels") or {}).get(POOL_LABEL) or "")


class PodSyncer:
    """Turns worker pod events into worker records and drains.

    Args:
        store: the control plane's store.
        pools: (namespace, pool name) -> the pool's spec, kept current by the pool watcher.
        drain: starts the drain of a node.
    """

    def __init__(self, store: ControllerStore, pools: dict[tuple[str, str], WorkerPoolSpec], drain: Drain) -> None:
        self.store = store
        self.pools = pools
        self.drain = drain
        self.draining: set[str] = set()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        """(namespace, name) -> each worker pod as the events handled so far leave it: what `resync`
        syncs again. Not the watcher's own view, which runs ahead of the events still queued: a
        pod synced from there could be newer than a pod list not yet handled, which would then
        retire its node for good."""
        self.listed = False
        """Whether a full list was handled: from then on `pods` is every worker pod there is."""

    async def on_listed(self, pods: list[dict[str, Any]]) -> None:
        """After a full list: the worker pods that are gone although no DELETED event said so
        (deleted while the controller was down, or during a watch gap) are retired too."""
        self.listed = True
        await self._retire_all_but({str((p.get("metadata") or {}).get("name")) for p in pods})

    async def _retire_all_but(self, alive: set[str]) -> None:
        """Retire the node of every worker pod whose name is not in `alive`."""
        for node in await self.store.nodes.live_pod_nodes():
            if node not in alive:
                await self.on_event("DELETED", {"metadata": {"name": node, "labels": {POOL_LABEL: "?"}}})

    async def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        """One event of a worker pod ("ADDED" | "MODIFIED" | "DELETED")."""
        meta = pod.get("metadata") or {}
        node = str(meta.get("name") or "")
        pool_name = (meta.get("labels") or {}).get(POOL_LABEL)
        if not node or not pool_name:
            return
        key = (str(meta.get("namespace") or ""), node)
        if kind == "DELETED":
            self.pods.pop(key, None)
            released = await self.store.nodes.retire(node, f"worker pod {meta.get('namespace')}/{node} was deleted")
            self.draining.discard(node)
            if released:
                log.info("pod %s deleted: released %s", node, ", ".join(f"{a.key} ({s})" for a, s in released))
            return
        self.pods[key] = pod
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30
            if int(grace) <= 0:  # a force delete: DELETED follows at once and releases the actors
                return
            if node not in self.draining:
                self.draining.add(node)
                log.info("pod %s is being deleted (grace %s s): draining its node", node, grace)
                await self.drain(node, float(max(int(grace), 1)))
            return
        ip = (pod.get("status") or {}).get("podIP")
        spec = self.pools.get((str(meta.get("namespace") or ""), pool_name))
        if not ip or spec is None:  # no address yet, or its WorkerPool is not known yet (synced when it is)
            log.debug("pod %s skipped: %s", node, "no pod IP yet" if not ip else f"WorkerPool {pool_name} not known yet")
            return
        worker = WorkerRegistration(
            name=worker_name(pool_name),
            pool=pool_name,
            ip=ip,
            sandbox_class=spec.sandbox_class,
            labels=dict(spec.labels),
            places=spec.places,
            cpu_millis=spec.cpu_millis,
            memory_bytes=spec.memory_bytes,
        )
        await self.store.nodes.sync_pod(node, f"{ip}:{ATELET_PORT}", worker, ready(pod))

    async def resync(self, pool: tuple[str, str] | None = None) -> None:
        """Sync every worker pod again (those of `pool`, a (namespace, name), when given) as the
        events handled so far leave it: the pods of a pool that just became known, whose events
        were skipped; at each resync, every pod, and the nodes of pods gone are retired (what an
        event whose handling failed left undone). A pod that fails is logged, the others go on."""
        for (namespace, node), pod in list(self.pods.items()):
            if pool is not None and pool_of(pod) != pool:
                continue
            try:
                await self.on_event("MODIFIED", pod)
            except Exception:
                log.exception("resync of worker pod %s/%s failed", namespace, node)
        if pool is None and self.listed:
            try:
                await self._retire_all_but({node for _, node in self.pods})
            except Exception:
                log.exception("resync of the worker pods gone failed")
