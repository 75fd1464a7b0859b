"""`ate controller`: wires the watchers of WorkerPools, their Deployments and their worker pods to
the reconciler and the pod syncer, and serves /metrics; stops on SIGTERM/SIGINT.

The official `kubernetes` client is synchronous: each watcher runs in a thread of its own and
hands events to the asyncio loop, where the pod syncer writes to PostgreSQL; the reconciler's
API calls run in threads too. The loop handles events one at a time, in the order they were
queued. The periodic resync (every `resync_seconds` or 10 s, whichever is shorter) is queued
too: it reconciles every pool again and syncs every worker pod again from the syncer's view.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import signal
import threading
from typing import Any

import httpx
from kubernetes import client, config
from prometheus_client import start_http_server

from controller import metrics
from controller.labels import MANAGED_BY, POOL_LABEL
from controller.pods import PodSyncer
from controller.pools import PLURAL, VERSION, PoolReconciler
from controller.settings import ControllerSettings
from controller.watch import Watcher, key_of
from domain.pools import API_GROUP, WorkerPoolSpec
from store import Store
from store.interfaces import ControllerStore

log = logging.getLogger("ate.controller")


def api_client(settings: ControllerSettings) -> client.ApiClient:
    """A Kubernetes client: the kubeconfig file when given, else the in-cluster service account."""
    configuration = client.Configuration()
    if settings.kubeconfig:
        config.load_kube_config(config_file=settings.kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


HANDLE_ATTEMPTS = 3
"""Tries per event before it waits for the next relist."""


class Controller:
    """The running controller: its watchers, reconciler and syncer.

    Args:
        settings: the controller's settings.
        kube: a Kubernetes client.
        store: the control plane's store.
    """

    def __init__(self, settings: ControllerSettings, kube: client.ApiClient, store: ControllerStore) -> None:
        self.settings = settings
        self.custom = client.CustomObjectsApi(kube)
        self.apps = client.AppsV1Api(kube)
        self.core = client.CoreV1Api(kube)
        self.store = store
        self.reconciler = PoolReconciler(self.apps, self.custom, settings)
        self.pools: dict[tuple[str, str], WorkerPoolSpec] = {}
        self.pool_objects: dict[tuple[str, str], dict[str, Any]] = {}
        token = settings.read_api_token()
        self.http = httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"} if token else None)
        self.syncer = PodSyncer(store, self.pools, self._drain)
        self.events: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
        self.resync_queued = False
        self.stop_event = threading.Event()
        self.watchers = self._watchers()

    def _watchers(self) -> list[Watcher]:
        ns = self.settings.namespace
        managed = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        if ns:
            pools = functools.partial(self.custom.list_namespaced_custom_object, API_GROUP, VERSION, ns, PLURAL)
            deployments = functools.partial(self.apps.list_namespaced_deployment, ns, label_selector=managed)
            pods = functools.partial(self.core.list_namespaced_pod, ns, label_selector=POOL_LABEL)
        else:
            pools = functools.partial(self.custom.list_cluster_custom_object, API_GROUP, VERSION, PLURAL)
            deployments = functools.partial(self.apps.list_deployment_for_all_namespaces, label_selector=managed)
            pods = functools.partial(self.core.list_pod_for_all_namespaces, label_selector=POOL_LABEL)
        loop = asyncio.get_running_loop()

        def emitter(kind: str) -> Any:
            return lambda event, obj: loop.call_soon_threadsafe(self.events.put_nowait, (kind, event, obj))

        def pods_listed(objects: list[dict[str, Any]]) -> None:
            loop.call_soon_threadsafe(self.events.put_nowait, ("pods-listed", "LISTED", {"items": objects}))

        return [
            Watcher("workerpools", pools, emitter("pool")),
            Watcher("deployments", deployments, emitter("deployment")),
            Watcher("pods", pods, emitter("pod"), listed=pods_listed),
        ]

    async def _drain(self, node: str, deadline_seconds: float) -> None:
        """Drain a worker pod's node through the API (idempotent: one EvictionDeadline per node)."""
        url = f"{self.settings.api_server.rstrip('/')}/v1/nodes/{node}/drain"
        try:
            response = await self.http.post(url, json={"deadline_seconds": deadline_seconds})
            if response.status_code >= 400:
                log.warning("drain of node %s answered %s: %s", node, response.status_code, response.text[:300])
        except httpx.HTTPError as error:
            log.warning("drain of node %s failed: %s", node, error)

    async def handle(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """One event of a watched object."""
        if kind == "pool":
            key = key_of(obj)
            if event == "DELETED":
                self.pools.pop(key, None)
                self.pool_objects.pop(key, None)
                return
            self.pool_objects[key] = obj
            spec = await asyncio.to_thread(self.reconciler.reconcile, obj)
            if spec is None:
                self.pools.pop(key, None)
                return
            known_before = key in self.pools
            self.pools[key] = spec
            if not known_before:  # the events of its pods handled so far were skipped: sync them now
                await self.syncer.resync(key)
        elif kind == "deployment":
            pool = (obj.get("metadata") or {}).get("labels", {}).get(POOL_LABEL)
            owner = self.pool_objects.get((key_of(obj)[0], pool or ""))
            if owner is not None and event != "DELETED":
                status = client.V1DeploymentStatus(
                    replicas=(obj.get("status") or {}).get("replicas"),
                    ready_replicas=(obj.get("status") or {}).get("readyReplicas"),
                )
                fresh = await asyncio.to_thread(self._fresh_pool, owner)
                if fresh is not None:
                    await asyncio.to_thread(self.reconciler.write_status, fresh, status)
        elif kind == "pod":
            await self.syncer.on_event(event, obj)
        elif kind == "pods-listed":
            await self.syncer.on_listed(obj["items"])
        elif kind == "resync":
            self.resync_queued = False
            await self._resync_everything()

    def _fresh_pool(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        meta = obj["metadata"]
        try:
            fresh = self.custom.get_namespaced_custom_object(API_GROUP, VERSION, meta["namespace"], PLURAL, meta["name"])
            return dict(fresh)  # type: ignore[call-overload, no-any-return]
        except client.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise

    async def run(self) -> None:
        """Watch and handle events until `stop` is called."""
        threads = [
            threading.Thread(target=w.run, args=(self.stop_event,), name=f"watch {w.name}", daemon=True)
            for w in self.watchers
        ]
        for thread in threads:
            thread.start()
        resync = asyncio.create_task(self._resync())
        try:
            while not self.stop_event.is_set():
                try:
                    kind, event, obj = await asyncio.wait_for(self.events.get(), timeout=1.0)
                except TimeoutError:
                    continue
                await self._handle_with_retries(kind, event, obj)
        finally:
            resync.cancel()
            for watcher in self.watchers:
                watcher.stop()
            await self.http.aclose()

    async def _handle_with_retries(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """`handle` one event, again after 0.5 s and 1 s when it fails (a deadlock or a dropped
        database connection must not lose a pod's deletion until the next resync); in order, so
        a later event of the same pod never overtakes it."""
        for attempt in range(HANDLE_ATTEMPTS):
            try:
                await self.handle(kind, event, obj)
                return
            except Exception:
                last = attempt == HANDLE_ATTEMPTS - 1
                log.exception(
                    "handling %s %s %s failed%s", kind, event, key_of(obj), "; the next resync retries" if last else ""
                )
                if not last:
                    await asyncio.sleep(0.5 * (attempt + 1))

    async def _resync(self) -> None:
        """Every resync period: refresh the worker gauge and queue a resync. Queued, not done here:
        handled between two events, it cannot interleave with one (a pod synced from an older
        state after a newer one, a pool half-known while its pods are handled)."""
        while True:
            try:
                metrics.set_workers(await self.store.nodes.list_workers())
            except Exception:
                log.exception("refreshing the worker gauge failed")
            await asyncio.sleep(min(10.0, self.settings.resync_seconds))
            if not self.resync_queued:
                self.resync_queued = True
                self.events.put_nowait(("resync", "RESYNC", {}))

    async def _resync_everything(self) -> None:
        """Reconcile every known pool again, as it is now, then sync every worker pod again (what an
        event whose handling failed left undone). One that fails is logged; the others go on."""
        for obj in list(self.pool_objects.values()):
            try:
                fresh = await asyncio.to_thread(self._fresh_pool, obj)
                if fresh is not None:
                    await self.handle("pool", "MODIFIED", fresh)
            except Exception:
                log.exception("resync of %s failed", key_of(obj))
        await self.syncer.resync()

    def stop(self) -> None:
        """Ask `run` to return."""
        self.stop_event.set()


async def serve(settings: ControllerSettings) -> None:
    """Run the controller until SIGTERM/SIGINT."""
    store = await Store.connect(settings.database_url, max_size=5)
    await store.migrate()
    kube = api_client(settings)
    controller = Controller(settings, kube, store)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop)
    if settings.metrics_listen:
        host, _, port = settings.metrics_listen.rpartition(":")
        start_http_server(int(port), addr=host or "0.0.0.0")
    print(f"controller: ready (namespace {settings.namespace or 'all'})", flush=True)
    try:
        await controller.run()
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    """`ate controller [--namespace NS] [--kubeconfig FILE] [--database-url URL] [--image IMAGE] ...`."""
    parser = argparse.ArgumentParser(prog="ate controller", description="ate's Kubernetes controller")
    parser.add_argument("--namespace", help="namespace of the WorkerPools ('' = all; env ATE_CONTROLLER_NAMESPACE)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster)")
    parser.add_argument("--database-url", help="PostgreSQL URL (env ATE_DATABASE_URL)")
    parser.add_argument("--image", help="image of the worker pods (env ATE_CONTROLLER_IMAGE)")
    parser.add_argument("--api-server", help="REST API the worker pods register with")
    parser.add_argument(
        "--api-token-file", help="file with the controller's API token, role cluster-operator (env ATE_CONTROLLER_API_TOKEN_FILE)"
    )
    parser.add_argument("--metrics-listen", help="host:port of /metrics ('' disables)")
    parser.add_argument("--resync-seconds", type=float)
    parser.add_argument("--images-claim", help="PersistentVolumeClaim with the OCI image layouts (default ate-images)")
    parser.add_argument("--worker-tls-issuer", help="cert-manager issuer of the worker pods' node certificates (default ate-ca)")
    parser.add_argument("--worker-tls-issuer-kind", choices=["Issuer", "ClusterIssuer"], help="its kind (default Issuer)")
    args = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    settings = ControllerSettings(**args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings))
