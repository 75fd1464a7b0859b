"""The pod syncer of ate-controller on a real kube-apiserver, with the real REST API, Temporal dev
server and Temporal worker: the tests play the kubelet (they patch pods' status: PodIP, Ready)
and check the control plane's view (worker records, actors, the EvictionDeadline workflow)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from kubernetes import client
from temporalio.client import Client, WorkflowExecutionStatus

from activities.atelet import AteletActivities
from api.app import create_app
from api.settings import ApiSettings
from controller.labels import POOL_LABEL
from controller.main import HANDLE_ATTEMPTS, Controller
from controller.pods import ready
from controller.pools import PLURAL, VERSION
from controller.settings import ControllerSettings
from controller.watch import Watcher
from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import NodeRetired, Store
from store.records import WorkerRegistration
from temporal_worker.main import build_worker
from temporal_worker.settings import WorkerSettings
from tests.conftest import temporal_dev_server
from tests.credentials import BOOTSTRAP_TOKEN
from tests.kubernetes.cluster import Cluster
from tests.tls import control_plane_tls

pytestmark = pytest.mark.kubernetes

GROUP = "ate.dev"
SPEC = {
    "containers": [{"name": "c", "image": "oci:x:latest", "port": 8080}],
    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
    "snapshotConfig": {"onPause": "Full", "onCommit": "Full", "storageLocation": "file:///snap"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def until(check: Callable[[], Any], seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with temporal_dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address


@dataclass
class Plane:
    """The control plane of a test: its store, the API's URL, Temporal, and the controller."""

    store: Store
    api_url: str
    temporal: Client
    controller: Controller
    task: asyncio.Task[None]
    kube: client.ApiClient
    namespace: str


@contextlib.asynccontextmanager
async def running_controller(
    settings: ControllerSettings, kube: client.ApiClient, store: Store, prepare: Callable[[Controller], None] | None = None
) -> AsyncIterator[Controller]:
    """A controller running in a task; `prepare` sees it before it starts (hooks of a test)."""
    controller = Controller(settings, kube, store)
    if prepare is not None:
        prepare(controller)
    task = asyncio.create_task(controller.run())
    try:
        yield controller
    finally:
        controller.stop()
        await asyncio.wait_for(task, 30)


@pytest.fixture
async def plane(
    cluster: Cluster, kube: client.ApiClient, namespace: str, store: Store, database_url: str, temporal_address: str
) -> AsyncIterator[Plane]:
    port = free_port()
    app = create_app(
        ApiSettings(
            database_url=database_url,
            temporal_address=temporal_address,
            snapshot_location="file:///snap",
            bootstrap_token=BOOTSTRAP_TOKEN,
        )
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    await until(lambda: server.started)
    temporal = await Client.connect(temporal_address)
    atelets = AteletActivities(store, call_timeout_seconds=5, tls=control_plane_tls())
    worker = build_worker(temporal, store, atelets, WorkerSettings())
    settings = ControllerSettings(
        namespace=namespace, kubeconfig=str(cluster.kubeconfig), api_server=f"http://127.0.0.1:{port}",
        metrics_listen="", resync_seconds=5, api_token=BOOTSTRAP_TOKEN,
    )  # fmt: skip
    try:
        async with worker, running_controller(settings, kube, store) as controller:
            yield Plane(store, f"http://127.0.0.1:{port}", temporal, controller, asyncio.current_task(), kube, namespace)  # type: ignore[arg-type]
    finally:
        server.should_exit = True
        await serving
        await atelets.close()


def create_pool(plane: Plane, name: str, replicas: int) -> None:
    client.CustomObjectsApi(plane.kube).create_namespaced_custom_object(
        GROUP, VERSION, plane.namespace, PLURAL,
        {"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool", "metadata": {"name": name, "labels": {"tier": "t"}},
         "spec": {"replicas": replicas, "capacity": {"cpu": "2", "memory": "2Gi"}}},
    )  # fmt: skip


def pods_of(plane: Plane, pool: str) -> list[client.V1Pod]:
    return list(client.CoreV1Api(plane.kube).list_namespaced_pod(plane.namespace, label_selector=f"{POOL_LABEL}={pool}").items)


def kubelet_reports(plane: Plane, pod: str, ip: str, ready: bool) -> None:
    """What a kubelet would do: the pod got an IP, its readiness probe passed (or not)."""
    status = "True" if ready else "False"
    client.CoreV1Api(plane.kube).patch_namespaced_pod_status(
        pod, plane.namespace,
        {"status": {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": status}]}},
    )  # fmt: skip


async def worker_of(store: Store, node: str) -> Any:
    return next((w for w in await store.nodes.list_workers() if w.node == node), None)


async def test_a_worker_pod_is_a_worker_active_only_while_ready(plane: Plane) -> None:
    create_pool(plane, "general", 1)
    [pod] = await until(lambda: pods_of(plane, "general"))  # made by the Deployment's ReplicaSet
    name = pod.metadata.name
    kubelet_reports(plane, name, "10.9.0.7", ready=False)
    worker = await until(lambda: worker_of(plane.store, name))
    assert (worker.name, worker.pool, worker.ip, worker.labels) == ("general-0", "general", "10.9.0.7", {"tier": "t"})
    assert (worker.cpu_millis, worker.memory_bytes, worker.state) == (2000, 2 * 2**30, "UNAVAILABLE")

    kubelet_reports(plane, name, "10.9.0.7", ready=True)
    await until(lambda: _state(plane.store, name, "ACTIVE"))
    # the pod's atelet registers the same worker (as a heartbeat): it stays ACTIVE
    registration = WorkerRegistration(name="general-0", pool="general", ip="10.9.0.7", sandbox_class="gvisor",
                                      labels={"tier": "t"}, places=1, cpu_millis=2000, memory_bytes=2 * 2**30)  # fmt: skip
    await plane.store.nodes.register(name, "10.9.0.7:8085", "v", [registration], {"general-0": None})
    assert (await worker_of(plane.store, name)).state == "ACTIVE"

    kubelet_reports(plane, name, "10.9.0.7", ready=False)
    await until(lambda: _state(plane.store, name, "UNAVAILABLE"))
    await plane.store.nodes.register(name, "10.9.0.7:8085", "v", [registration], {"general-0": None})
    worker = await worker_of(plane.store, name)
    assert worker.state == "UNAVAILABLE"  # a heartbeat does not lift what the pod's readiness says


async def _state(store: Store, node: str, state: str) -> bool:
    worker = await worker_of(store, node)
    return worker is not None and worker.state == state


async def test_a_deleted_pod_crashes_its_running_actor_and_is_never_brought_back(plane: Plane) -> None:
    store = plane.store
    create_pool(plane, "solo", 1)
    [pod] = await until(lambda: pods_of(plane, "solo"))
    name = pod.metadata.name
    kubelet_reports(plane, name, "10.9.0.8", ready=True)
    await until(lambda: _state(store, name, "ACTIVE"))
    await store.atespaces.create("demo")
    await store.templates.create("demo", "counter", ActorTemplateSpec.from_document(SPEC))
    async with store.pool.acquire() as connection:  # a golden snapshot, as GoldenSnapshot leaves it
        golden = await connection.fetchval(
            "INSERT INTO snapshots (owner, generation, scope, uri, sandbox_class, operation_id, state, manifest) "
            "VALUES ('template/demo/counter', 1, 'FULL', 'file:///snap/g', 'gvisor', 'g', 'COMPLETED', '{}') RETURNING id"
        )
    await store.templates.set_phase("demo", "counter", "Ready", None, golden)
    ref = ActorRef("demo", "a1")
    await store.actors.create(ref, "counter", {})
    plan = await store.resumes.begin(ref, "r1")
    assert plan.worker is not None and plan.worker.node == name
    await store.resumes.finish(ref, "r1")

    client.CoreV1Api(plane.kube).delete_namespaced_pod(name, plane.namespace, grace_period_seconds=0)
    released = await until(lambda: _released(store, ref))
    # its sandbox went with the pod: CRASHED (ARCHITECTURE.md: node known gone), not silently reverted
    assert released.state == "CRASHED" and released.worker is None
    assert (released.last_error or "").startswith(f"worker pod {plane.namespace}/{name} was deleted while the actor ran")
    assert await worker_of(store, name) is None
    # its atelet's late heartbeat is refused: a deleted worker never comes back
    registration = WorkerRegistration(name="solo-0", pool="solo", ip="10.9.0.8", sandbox_class="gvisor",
                                      labels={}, places=1, cpu_millis=2000, memory_bytes=2 * 2**30)  # fmt: skip
    with pytest.raises(NodeRetired):
        await store.nodes.register(name, "10.9.0.8:8085", "v", [registration], {"solo-0": None})
    assert await worker_of(store, name) is None


async def _released(store: Store, ref: ActorRef) -> Any:
    actor = await store.actors.get(ref)
    return actor if actor.state != "RUNNING" else None


async def test_an_evicted_pod_is_drained_by_the_eviction_deadline_workflow(plane: Plane) -> None:
    core = client.CoreV1Api(plane.kube)
    create_pool(plane, "evict", 0)  # the pool is known; its pod is one a kubelet runs on node n1
    await until(lambda: (plane.namespace, "evict") in plane.controller.pools)
    core.create_namespaced_pod(plane.namespace, {
        "metadata": {"name": "evict-pod", "labels": {POOL_LABEL: "evict"}},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 7,
                 "containers": [{"name": "atelet", "image": "ate:test"}]},
    })  # fmt: skip
    kubelet_reports(plane, "evict-pod", "10.9.0.9", ready=True)
    await until(lambda: _state(plane.store, "evict-pod", "ACTIVE"))
    core.delete_namespaced_pod("evict-pod", plane.namespace)  # with its grace period: deletionTimestamp set
    handle = plane.temporal.get_workflow_handle("node/evict-pod/drain")

    async def drained() -> bool:
        with contextlib.suppress(Exception):
            return (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
        return False

    await until(drained, 60)
    description = await handle.describe()
    assert description.workflow_type == "EvictionDeadline"
    worker = await worker_of(plane.store, "evict-pod")
    assert worker is not None and worker.state == "UNAVAILABLE"  # a draining node takes no new actor
    core.delete_namespaced_pod("evict-pod", plane.namespace, grace_period_seconds=0)  # the kubelet is done
    await until(lambda: _gone(plane.store, "evict-pod"))


async def _gone(store: Store, node: str) -> bool:
    return await worker_of(store, node) is None


async def test_a_restarted_controller_converges_on_what_happened_while_it_was_down(
        cluster: Cluster, kube: client.ApiClient, namespace: str, store: Store, database_url: str,
        temporal_address: str) -> None:
    settings = ControllerSettings(namespace=namespace, kubeconfig=str(cluster.kubeconfig), metrics_listen="",
                                  api_server="http://127.0.0.1:1")  # fmt: skip
    core = client.CoreV1Api(kube)
    plane = Plane(store, "", None, None, None, kube, namespace)  # type: ignore[arg-type]
    async with running_controller(settings, kube, store) as controller:
        pods = await _two_ready_workers(plane, controller, "two", "10.9.1")
    # down: one pod is deleted (its ReplicaSet makes another), no controller sees the event
    gone = pods[0].metadata.name
    core.delete_namespaced_pod(gone, namespace, grace_period_seconds=0)
    replacement = await until(lambda: [p for p in pods_of(plane, "two") if p.metadata.name not in {q.metadata.name for q in pods}])
    kubelet_reports(plane, replacement[0].metadata.name, "10.9.1.3", ready=True)
    assert await worker_of(store, gone) is not None  # the store still believes in it
    async with running_controller(settings, kube, store):
        await until(lambda: _gone(store, gone))
        await until(lambda: _state(store, replacement[0].metadata.name, "ACTIVE"))
        assert (await worker_of(store, pods[1].metadata.name)).state == "ACTIVE"


def wait_for(check: Callable[[], bool], seconds: float = 30.0) -> None:
    """In a thread of the controller (a hook): wait until `check()` holds."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


async def test_a_pool_known_only_once_its_pods_are_ready_keeps_their_workers(
        cluster: Cluster, kube: client.ApiClient, namespace: str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a loaded machine did once in CI, in a fixed order: the pods are listed (none yet) while the
    pool's first event is handled, and its Deployment's pods turn Ready before that handling ends. The
    pods-listed event, handled next, is older than those pods: it must not retire their workers (the
    syncer once synced them from the pod watcher's view, ahead of the queue, and the list then retired
    them for good)."""
    settings = ControllerSettings(namespace=namespace, kubeconfig=str(cluster.kubeconfig), metrics_listen="",
                                  api_server="http://127.0.0.1:1")  # fmt: skip
    plane = Plane(store, "", None, None, None, kube, namespace)  # type: ignore[arg-type]

    def order_the_race(controller: Controller) -> None:
        pods = controller.watchers[2]
        list_pods, reconcile = pods.list_objects, controller.reconciler.reconcile

        def list_once_the_pool_is_being_handled(**kwargs: Any) -> Any:
            if not kwargs.get("watch"):
                wait_for(lambda: (namespace, "late") in controller.pool_objects)
            return list_pods(**kwargs)

        def reconcile_while_the_pods_turn_ready(obj: dict[str, Any]) -> Any:
            wait_for(lambda: pods.relists > 0)  # listed before the Deployment exists: no pods
            spec = reconcile(obj)
            wait_for(lambda: sum(ready(p) and bool(p["status"].get("podIP")) for p in pods.known.values()) == 2)
            return spec

        pods.list_objects = list_once_the_pool_is_being_handled
        monkeypatch.setattr(controller.reconciler, "reconcile", reconcile_while_the_pods_turn_ready)

    async with running_controller(settings, kube, store, order_the_race) as controller:
        await _two_ready_workers(plane, controller, "late", "10.9.2")


async def test_what_a_failed_pod_event_left_undone_is_done_by_the_next_resync(
        cluster: Cluster, kube: client.ApiClient, namespace: str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database fails every try of a pod's event (its Ready, then its deletion): no event comes
    again, the resync syncs the pod and retires its node."""
    settings = ControllerSettings(namespace=namespace, kubeconfig=str(cluster.kubeconfig), metrics_listen="",
                                  api_server="http://127.0.0.1:1", resync_seconds=1)  # fmt: skip
    plane = Plane(store, "", None, None, None, kube, namespace)  # type: ignore[arg-type]
    failures: dict[str, int] = {}
    database_down = False

    def failing(method: str) -> Callable[..., Any]:
        real = getattr(store.nodes, method)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if database_down:
                failures[method] = failures.get(method, 0) + 1
                raise ConnectionError("the database is unreachable")
            return await real(*args, **kwargs)

        return call

    monkeypatch.setattr(store.nodes, "sync_pod", failing("sync_pod"))
    monkeypatch.setattr(store.nodes, "retire", failing("retire"))
    async with running_controller(settings, kube, store):
        create_pool(plane, "flaky", 1)
        [pod] = await until(lambda: pods_of(plane, "flaky"))
        name = pod.metadata.name
        database_down = True
        kubelet_reports(plane, name, "10.9.3.1", ready=True)
        await until(lambda: failures.get("sync_pod", 0) >= HANDLE_ATTEMPTS)  # the event is given up
        database_down = False
        await until(lambda: _state(store, name, "ACTIVE"), 10)

        database_down = True
        client.CoreV1Api(kube).delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        await until(lambda: failures.get("retire", 0) >= HANDLE_ATTEMPTS)
        database_down = False
        await until(lambda: _gone(store, name), 10)
        assert name not in await store.nodes.live_pod_nodes()


async def _two_ready_workers(plane: Plane, controller: Controller, pool: str, network: str) -> list[Any]:
    """Create pool `pool` of 2, report its pods Ready at `<network>.1` and `.2` as a kubelet
    would, and wait until both are ACTIVE workers (else say what the controller and the store saw)."""
    create_pool(plane, pool, 2)
    pods: list[Any] = await until(lambda: (p := pods_of(plane, pool)) and len(p) == 2 and p)
    for i, pod in enumerate(pods):
        kubelet_reports(plane, pod.metadata.name, f"{network}.{i + 1}", ready=True)
    for pod in pods:
        try:
            await until(lambda pod=pod: _state(plane.store, pod.metadata.name, "ACTIVE"))
        except AssertionError as failure:
            raise AssertionError(await _what_was_seen(plane, controller, pool)) from failure
    return pods


async def _what_was_seen(plane: Plane, controller: Controller, pool: str) -> str:
    pods = [(p.metadata.name, p.status.pod_ip, [(c.type, c.status) for c in p.status.conditions or []],
             p.metadata.deletion_timestamp) for p in pods_of(plane, pool)]  # fmt: skip
    workers = [(w.node, w.name, w.state) for w in await plane.store.nodes.list_workers()]
    known = sorted(controller.pools)
    return f"pods {pods}; workers {workers}; pools known to the controller {known}; events queued {controller.events.qsize()}"


def test_a_watch_that_expired_lists_again_and_loses_no_event(cluster: Cluster, kube: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube)

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {"w": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    core.create_namespaced_pod(namespace, pod("stays"))
    core.create_namespaced_pod(namespace, pod("goes"))
    events: list[tuple[str, str]] = []
    gate = threading.Event()
    gate.set()

    def list_pods(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            gate.wait()  # while closed, the watch cannot resume: events pile up unseen
        return core.list_namespaced_pod(namespace, label_selector="w=1", **kwargs)

    watcher = Watcher("pods", list_pods, lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
                      timeout_seconds=1)  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(events) == [("ADDED", "goes"), ("ADDED", "stays")]
    gate.clear()  # the next watch call (after its 1 s timeout) waits
    time.sleep(1.5)
    core.delete_namespaced_pod("goes", namespace, grace_period_seconds=0)
    core.create_namespaced_pod(namespace, pod("new"))
    cluster.compact()  # the watch's resourceVersion is now too old: 410 Gone
    gate.set()
    deadline = time.monotonic() + 20
    while not {("DELETED", "goes"), ("ADDED", "new")} <= set(events) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    watcher.stop()
    thread.join(10)
    assert {("DELETED", "goes"), ("ADDED", "new")} <= set(events), events
    assert watcher.relists >= 2  # the expired watch was answered by a new list
    assert set(watcher.known) == {(namespace, "stays"), (namespace, "new")}
