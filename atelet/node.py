"""The node: its workers and stores, started and stopped as one, and the calls the gRPC service
(``atelet.service``), the heartbeat (``atelet.registration``) and the drain (``atelet.drain``) make.

``Node`` builds the parts and wires them; each lives in its own module:

- ``atelet.layout``: the files under ``state_dir``;
- ``atelet.workers``: the worker slots, their locks and their records (``atelet.assignments``);
- ``atelet.sandbox_ops``: Run, Restore, Checkpoint, Terminate; ``atelet.snapshot_ops``:
  DeleteSnapshot, CopySnapshot; ``atelet.freeze_ops``: Freeze, Thaw; ``atelet.exec_ops``: Exec;
- ``atelet.sandbox``: booting and stopping one worker's sandbox;
- ``atelet.drivers``: the runtime of each sandbox class behind ``SandboxDriver`` (``gvisor``: runsc;
  ``microvm``: QEMU), one per class among the pools, each worker served by its pool's class's;
- ``atelet.exits``: sandboxes that exit on their own (``on_exit`` is called once per exit);
- ``atelet.adoption``: taking over the sandboxes of a previous atelet process at ``start``;
- ``atelet.snapshots``: the snapshot store; ``atelet.images``: the images.

Every mutating call goes through the operation log (``atelet.oplog``): a repeat of a completed
operation_id returns the recorded response, a repeat of a running one waits for it. Each call is
counted in its worker's ``inflight`` while it runs and observed in ``atelet.metrics``.

``fence`` terminates a sandbox at the control plane's request, unless an operation is in flight on
its worker.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from atelet import forwarding, isolation, local_endpoint_rules, metrics, netns
from atelet.adoption import adopt_sandboxes
from atelet.assignments import AssignmentStore
from atelet.checkpoint_ops import CheckpointOperations
from atelet.drivers import Drivers
from atelet.drivers.gvisor import GVisorDriver
from atelet.drivers.microvm import accelerator
from atelet.drivers.microvm.driver import MicrovmDriver
from atelet.egress import rules as egress_rules
from atelet.egress.sandbox import SandboxEgress, write_ca_bundle
from atelet.errors import AteletError, invalid
from atelet.exec_ops import ExecOperations
from atelet.exits import ExitReport, ExitWatcher
from atelet.freeze_ops import FreezeOperations
from atelet.images import ImageStore
from atelet.layout import NodeLayout
from atelet.oplog import OperationLog
from atelet.proto import atelet_pb2 as pb
from atelet.registry import RegistryPuller
from atelet.sandbox import SandboxRunner
from atelet.sandbox_ops import SandboxOperations
from atelet.settings import AteletSettings
from atelet.snapshot_ops import SnapshotOperations
from atelet.snapshots.cache import SnapshotCache
from atelet.snapshots.places import SnapshotPlaces
from atelet.snapshots.remote import ObjectStores
from atelet.snapshots.store import SnapshotStore
from atelet.workers import WorkerTable, describe
from domain.pools import WorkerPoolSpec

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)


class Node:
    """All workers of this node plus the stores they use. Call ``start`` before use, ``stop`` after.

    Args:
        settings: the atelet's settings.
        pools: the worker pools (worker ``<pool>-<i>``).

    Raises:
        SnapshotRootError: the snapshot roots and the local snapshot root overlap.
    """

    def __init__(self, settings: AteletSettings, pools: list[WorkerPoolSpec]) -> None:
        self.settings = settings
        self.layout = NodeLayout(Path(settings.state_dir).resolve())
        self.state_dir = self.layout.root
        self.images = ImageStore(settings.image_roots, self.layout.images,
                                 RegistryPuller(self.layout.images / "registry", settings.insecure_registries,
                                                max_bytes=settings.image_cache_bytes))
        classes = {pool.sandbox_class for pool in pools if pool.replicas}  # no runsc needed for 0 gVisor workers
        self.drivers: Drivers = {}
        if "gvisor" in classes:
            self.drivers["gvisor"] = GVisorDriver(settings.runsc, self.layout.runsc, self.images)
        if "microvm" in classes:
            self.drivers["microvm"] = MicrovmDriver(self.layout.root / "microvm", self.images,
                                                    settings.guest_kernel_dir, "tcg", settings.microvm_durable_dir_mib)
        self.snapshots = SnapshotStore(settings.snapshot_roots, settings.local_snapshot_dir)
        self.cache = SnapshotCache(Path(settings.snapshot_cache).resolve(), settings.snapshot_cache_bytes)
        self.places = SnapshotPlaces(self.snapshots, ObjectStores(settings.object_store_locations, settings.object_store_retry_seconds), self.cache)
        self.ops = OperationLog(self.layout.operations)
        self.assignments = AssignmentStore(self.layout.workers)
        self.pools = pools
        self.table = WorkerTable(settings, pools, self.layout, self.assignments)
        self.workers = self.table.by_name
        # Called once per sandbox that exits on its own: (worker name, actor, one-line reason).
        self.on_exit: ExitReport | None = None
        # Called when a Run or Restore of an actor starts on a worker: (worker name, actor); the
        # egress proxy fetches the actor's policy then (``atelet.egress.proxy``).
        self.on_placed: Callable[[str, tuple[str, str]], None] | None = None
        # The workers whose actor had outbound traffic since the last call or has some in flight
        # (``EgressProxy.active_workers``), reported in each heartbeat; None: no egress proxy.
        self.egress_active: Callable[[], Awaitable[set[str]]] | None = None
        self.exits = ExitWatcher(self.drivers, self.table, self.layout, self._report_exit)
        self.runner = SandboxRunner(self.drivers, self.table, self.layout, self.exits)
        self.sandbox_ops = SandboxOperations(settings.hollow, self.table, self.layout, self.images,
                                             self.places, self.drivers, self.runner)
        self.checkpoint_ops = CheckpointOperations(settings.hollow, self.table, self.layout, self.places,
                                                   self.drivers, self.runner, settings.checkpoint_compression)
        self.snapshot_ops = SnapshotOperations(settings.hollow, self.places)
        self.freeze_ops = FreezeOperations(settings.hollow, self.table, self.drivers)
        self.exec_ops = ExecOperations(settings.hollow, self.table, self.layout, self.drivers)
        self.checkpoint_ops.end_execs = self.exec_ops.end

    @property
    def runsc_version(self) -> str:
        """The gVisor build of this node (``hollow`` in hollow mode; '' before ``start`` or
        without gvisor workers)."""
        return self.table.runsc_version

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Creates dirs, confines the workers' networks (``atelet.isolation``), adopts the sandboxes
        of a previous run that still run (``atelet.adoption``), removes the other leftovers, creates
        every other worker's namespace."""
        self.layout.create()
        for root in self.snapshots.roots:
            root.mkdir(parents=True, exist_ok=True)
        assert self.snapshots.local_root is not None
        self.snapshots.local_root.mkdir(parents=True, exist_ok=True)
        # the staging dirs of checkpoints the previous atelet left unfinished are finished now
        unfinished = [Path(r.checkpoint.staging) for r in self.assignments.load_all().values() if r.checkpoint]
        for leftover in await asyncio.to_thread(self.snapshots.remove_local_staging, unfinished):
            log.warning("removed %s: a local snapshot the previous atelet did not finish", leftover)
        await asyncio.to_thread(self.cache.start, unfinished)
        if self.settings.hollow:
            self.table.runtime_versions = {c: "hollow" for c in (*self.drivers, "gvisor")}
        else:
            microvm = self.drivers.get("microvm")
            if isinstance(microvm, MicrovmDriver):
                try:
                    microvm.accelerator = await accelerator.choose(self.settings.microvm_accelerator, microvm.kernel)
                except ValueError as error:
                    raise invalid(str(error)) from None
            for sandbox_class, driver in self.drivers.items():
                self.table.runtime_versions[sandbox_class] = await driver.version()
            await self._egress_settings()
            await isolation.install(self.settings.node, self._openings())  # before any sandbox is adopted or started
            if self.settings.local_endpoint_on:
                await local_endpoint_rules.install(self.settings.node, self.settings.local_endpoint_port)
            endpoint_port = self.settings.local_endpoint_port if self.settings.local_endpoint_on else 0
            await egress_rules.install_redirect(self.settings.node, self._egress_ports(), endpoint_port)
            for op_id, kind in self.ops.in_flight():
                log.warning("operation %s (%s) was in flight when the previous atelet stopped", op_id, kind)
            await adopt_sandboxes(self.drivers, self.table, self.exits)
            for worker in self.workers.values():
                if worker.checkpoint is not None:
                    self.checkpoint_ops.follow(worker)
            await asyncio.gather(*(netns.create(w.net) for w in self.workers.values() if not w.adopted))
            if self.settings.advertise_worker_ip:
                [only] = self.workers.values()
                await forwarding.install(self.settings.advertise_worker_ip, only.net.worker_ip, self._own_ports())
        self.table.update_metrics()

    def _openings(self) -> list[isolation.Opening]:
        """Each worker's way to the local endpoint on its gateway, when it is served, and to the
        egress proxy's ports there (only as redirected), when it runs."""
        openings = []
        for w in self.workers.values():
            if self.settings.local_endpoint_on:
                openings.append(isolation.Opening(w.net.host_if, w.net.worker_ip, w.net.host_ip,
                                                  self.settings.local_endpoint_port))  # fmt: skip
            openings += [isolation.Opening(w.net.host_if, w.net.worker_ip, w.net.host_ip, port, dnat=True)
                         for port in self._egress_ports() or ()]  # fmt: skip
        return openings

    def _egress_ports(self) -> tuple[int, int, int] | None:
        """The egress proxy's (explicit, intercepted HTTP, intercepted TLS) ports, when it runs."""
        s = self.settings
        return (s.egress_proxy_port, s.egress_http_port, s.egress_https_port) if s.egress_on else None

    async def _egress_settings(self) -> None:
        """Writes the sandboxes' CA bundle (the system's roots, and the egress CA when given) and
        gives the drivers the egress settings of their sandboxes (``atelet.egress.sandbox``)."""
        s = self.settings
        bundle = await asyncio.to_thread(write_ca_bundle, self.layout.ca_bundle, s.egress_system_roots_file,
                                         s.egress_ca_cert_file)  # fmt: skip
        egress = SandboxEgress(proxy=s.egress_on, ca_mount=bundle)
        for driver in self.drivers.values():
            if isinstance(driver, GVisorDriver | MicrovmDriver):
                driver.egress = egress

    def _own_ports(self) -> list[int]:
        """The TCP ports of the atelet itself (gRPC, metrics): never forwarded to the worker."""
        ports = [int(self.settings.listen.rpartition(":")[2])]
        if self.settings.metrics_listen:
            ports.append(int(self.settings.metrics_listen.rpartition(":")[2]))
        return ports

    async def stop(self) -> None:
        """Terminates every sandbox, deletes every namespace this node created, then its isolation rules."""
        await self.ops.drain()
        for worker in self.workers.values():
            if worker.settling is not None:
                worker.settling.cancel()
        for worker in self.workers.values():
            async with worker.lock:
                if not self.settings.hollow:
                    await self.runner.stop(worker)
                self.table.free(worker)
        await self.runner.settle()
        await self.exits.stop(self.workers.values())
        if not self.settings.hollow:
            for driver in self.drivers.values():
                for cid in await driver.list():
                    await driver.delete(cid)
            await asyncio.gather(*(netns.destroy(w.net) for w in self.workers.values()))
            if self.settings.advertise_worker_ip:
                await forwarding.remove()
            await local_endpoint_rules.remove(self.settings.node)
            await egress_rules.remove_redirect(self.settings.node)
            await isolation.remove(self.settings.node)
        self.table.update_metrics()

    def _report_exit(self, worker: str, actor: tuple[str, str], reason: str) -> None:
        if self.on_exit is not None:
            self.on_exit(worker, actor, reason)

    # ---- operations ------------------------------------------------------------------------

    async def run(self, req: pb.RunRequest) -> pb.RunResponse:
        """Cold boot of ``req.actor`` on ``req.worker`` from its template's image (``SandboxOperations.run``)."""
        self._placed(req.worker, req.actor)
        return await self._measured("run", req.operation_id, pb.RunResponse,
                                    lambda: self.sandbox_ops.run(req), req.worker)

    async def restore(self, req: pb.RestoreRequest) -> pb.RestoreResponse:
        """Restores ``req.actor`` on ``req.worker`` from the snapshot at ``req.snapshot_uri``
        (``SandboxOperations.restore``)."""
        self._placed(req.worker, req.actor)
        return await self._measured("restore", req.operation_id, pb.RestoreResponse,
                                    lambda: self.sandbox_ops.restore(req), req.worker)

    def _placed(self, worker: str, actor: pb.ActorRef) -> None:
        if self.on_placed is not None and worker in self.workers and actor.atespace and actor.name:
            self.on_placed(worker, (actor.atespace, actor.name))

    async def checkpoint(self, req: pb.CheckpointRequest) -> pb.CheckpointResponse:
        """Checkpoints ``req.actor`` on ``req.worker`` to ``req.snapshot_uri`` and frees the worker
        (``CheckpointOperations.checkpoint``)."""
        return await self._measured("checkpoint", req.operation_id, pb.CheckpointResponse,
                                    lambda: self.checkpoint_ops.checkpoint(req), req.worker)

    async def terminate(self, req: pb.TerminateRequest) -> pb.TerminateResponse:
        """Stops and deletes ``req.actor``'s sandbox on ``req.worker``; fine when nothing runs
        (``SandboxOperations.terminate``)."""
        return await self._measured("terminate", req.operation_id, pb.TerminateResponse,
                                    lambda: self.sandbox_ops.terminate(req), req.worker)

    async def freeze(self, req: pb.FreezeRequest) -> pb.FreezeResponse:
        """Freezes ``req.actor``'s sandbox on ``req.worker`` in place (``FreezeOperations.freeze``)."""
        return await self._measured("freeze", req.operation_id, pb.FreezeResponse,
                                    lambda: self.freeze_ops.freeze(req), req.worker)

    async def thaw(self, req: pb.ThawRequest) -> pb.ThawResponse:
        """Lets ``req.actor``'s frozen sandbox on ``req.worker`` run again (``FreezeOperations.thaw``)."""
        return await self._measured("thaw", req.operation_id, pb.ThawResponse,
                                    lambda: self.freeze_ops.thaw(req), req.worker)

    async def exec(self, req: pb.ExecRequest) -> pb.ExecResponse:
        """Runs a command in ``req.actor``'s sandbox on ``req.worker`` until it ends
        (``ExecOperations.exec``; not recorded in the operation log: a repeat runs it again; not
        counted in the worker's ``inflight``: an exec keeps no operation from the worker)."""
        return await self._measured("exec", req.operation_id, pb.ExecResponse,
                                    lambda: self.exec_ops.exec(req), record=False)

    async def delete_snapshot(self, req: pb.DeleteSnapshotRequest) -> pb.DeleteSnapshotResponse:
        """Deletes the snapshot at ``req.snapshot_uri`` (``SnapshotOperations.delete_snapshot``)."""
        # Not recorded: deleting is idempotent by itself, and existed=false tells a repeat.
        return await self._measured("delete_snapshot", req.operation_id, pb.DeleteSnapshotResponse,
                                    lambda: self.snapshot_ops.delete_snapshot(req), record=False)

    async def copy_snapshot(self, req: pb.CopySnapshotRequest) -> pb.CopySnapshotResponse:
        """Copies the snapshot at ``req.source_uri`` to ``req.destination_uri``
        (``SnapshotOperations.copy_snapshot``)."""
        return await self._measured("copy_snapshot", req.operation_id, pb.CopySnapshotResponse,
                                    lambda: self.snapshot_ops.copy_snapshot(req))

    async def _measured(self, kind: str, op_id: str, response_type: type[M], fn: Callable[[], Awaitable[M]],
                        worker_name: str = "", *, record: bool = True) -> M:
        """Runs ``fn`` through the operation log (``record``) or directly, counted in the worker's
        ``inflight`` for as long as it runs (the log shields it from the caller's cancellation)."""
        async def tracked() -> M:
            with self.table.inflight(worker_name):
                return await fn()

        start = time.monotonic()
        outcome = "ok"
        try:
            if not record:
                if not op_id:
                    raise invalid("operation_id: required")
                return await tracked()
            return await self.ops.run(op_id, kind, response_type, tracked)
        except AteletError as exc:
            outcome = exc.code.name
            raise
        except BaseException:
            outcome = "INTERNAL"
            raise
        finally:
            metrics.observe(kind, outcome, time.monotonic() - start)
            self.table.update_metrics()

    # ---- control plane ---------------------------------------------------------------------

    async def fence(self, worker_name: str, actor: tuple[str, str]) -> bool:
        """Terminates ``actor``'s sandbox (running or exited) on ``worker_name`` at the control plane's
        request. Does nothing (False) when the worker holds another actor or nothing, or when an
        operation is in flight on it (the control plane asks again at the next heartbeat)."""
        worker = self.workers.get(worker_name)
        if worker is None or worker.actor != actor:
            log.debug("fence of %s/%s on %s: not there (%s), nothing to do", *actor, worker_name,
                      describe(worker.actor) if worker else "no such worker")
            return False
        if worker.inflight or worker.lock.locked():
            log.info("fence of %s/%s on %s deferred: an operation is in flight", *actor, worker_name)
            return False
        async with worker.lock:  # free and without waiters: taken at once, no operation can slip in
            if worker.actor != actor:
                return False
            if not self.settings.hollow:
                await self.runner.stop(worker)
                # The actor's dir is the node's, not the worker's: when the actor was meanwhile
                # placed on another worker here (its old sandbox exited, it was reverted and
                # resumed), that sandbox owns it now.
                if not self.table.elsewhere(worker, actor):
                    shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
            self.table.free(worker)
            self.table.update_metrics()
        log.warning("fenced: terminated %s/%s on %s at the control plane's request", *actor, worker_name)
        return True

    def idle(self) -> bool:
        """True when no sandbox runs on any worker and no operation is in flight."""
        return all(w.state != "running" and not w.inflight and not w.lock.locked() for w in self.workers.values())

    def health(self) -> pb.HealthResponse:
        """The node, its runsc build and every worker with what runs on it."""
        return pb.HealthResponse(
            node=self.settings.node,
            runsc_version=self.runsc_version,
            workers=[
                pb.WorkerStatus(
                    name=w.name, pool=w.pool.name, ip=w.net.worker_ip, sandbox_state=w.state,
                    exit_reason=w.exit_reason, frozen=w.frozen and w.state == "running",
                    actor=pb.ActorRef(atespace=w.actor[0], name=w.actor[1]) if w.actor else None,
                )
                for w in self.workers.values()
            ],
        )
