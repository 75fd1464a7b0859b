"""What Run, Restore, Checkpoint and Terminate do to a worker's sandbox.

Each method is the body of one RPC; ``Node`` runs it through the operation log (``atelet.oplog``)
and counts it in the worker's ``inflight``. Each takes the worker's lock for the whole change.
A Run/Restore repeated with the operation ID that started the sandbox now running on the worker
(the atelet died before it recorded the response, then adopted the sandbox) probes that sandbox
and answers success instead of starting a second one.

Errors: INVALID_ARGUMENT (spec, URIs, names), NOT_FOUND (unknown worker, no snapshot),
FAILED_PRECONDITION (worker busy with another actor, actor not on the worker, snapshot exists,
manifest mismatch), UNAVAILABLE (probe timeout, checkpoint blocked, the actor runs on another worker
of the node: ``WorkerTable.claim``), INTERNAL.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from atelet import probe
from atelet.drivers import Drivers
from atelet.errors import AteletError, invalid, precondition
from atelet.images import ImageStore
from atelet.layout import NodeLayout
from atelet.proto import atelet_pb2 as pb
from atelet.sandbox import DEFAULT_PROBE_TIMEOUT, SandboxRunner
from atelet.snapshots.manifest import CHECKPOINT_DIR, VOLUMES_DIR, size_of
from atelet.snapshots.places import CheckpointTarget, SnapshotPlaces
from atelet.snapshots.volumes import archive_dir, extract_dir
from atelet.spec import actor_key, validate_spec
from atelet.workers import Worker, WorkerTable, describe
from domain.failpoints import failpoint

log = logging.getLogger(__name__)


class SandboxOperations:
    """Run, Restore, Checkpoint and Terminate on the node's workers.

    Args:
        hollow: benchmark mode: accept calls, run no sandbox.
        table: the workers.
        layout: actor dirs and volume dirs.
        images: validates image references.
        snapshots: reads and writes the snapshots, on disk and in object storage.
        drivers: the runtime of each sandbox class (a worker's is its pool's class's).
        runner: boots and stops the sandboxes.
        checkpoint_compression: ``auto`` (compress only what goes to object storage), ``none``
            or ``flate-best-speed`` (see AteletSettings).
    """

    def __init__(self, hollow: bool, table: WorkerTable, layout: NodeLayout, images: ImageStore,
                 snapshots: SnapshotPlaces, drivers: Drivers, runner: SandboxRunner,
                 checkpoint_compression: str = "auto") -> None:
        self.hollow = hollow
        self.checkpoint_compression = checkpoint_compression
        self.table = table
        self.layout = layout
        self.images = images
        self.snapshots = snapshots
        self.drivers = drivers
        self.runner = runner

    async def run(self, req: pb.RunRequest) -> pb.RunResponse:
        """Cold boot of ``req.actor`` on ``req.worker`` from its template's image (durable dirs empty).

        Returns:
            The worker's IP, boot and probe seconds.

        Raises:
            AteletError: see the module doc.
        """
        actor = actor_key(req.actor)
        validate_spec(req.spec)
        self.images.resolve(req.spec.containers[0].image, "spec.containers[0].image")
        worker = self.table.get(req.worker)
        async with worker.lock:
            already = await self._started_by(worker, actor, req.operation_id, "run", req)
            if already is not None:
                return pb.RunResponse(worker_ip=worker.net.worker_ip, probe_seconds=already)
            with self.table.claim(worker, actor):
                if self.hollow:
                    worker.actor, worker.state, worker.operation = actor, "running", (req.operation_id, "run")
                    return pb.RunResponse(worker_ip=worker.net.worker_ip)
                shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)  # a cold boot starts empty
                boot, probe_s = await self.runner.boot(worker, actor, req.spec, None, req.probe_timeout_seconds,
                                                       (req.operation_id, "run"))
                await failpoint("Atelet.run.after_boot")
                log.info("run %s/%s on %s: boot %.3fs probe %.3fs", *actor, worker.name, boot, probe_s)
                return pb.RunResponse(worker_ip=worker.net.worker_ip, boot_seconds=boot, probe_seconds=probe_s)

    async def restore(self, req: pb.RestoreRequest) -> pb.RestoreResponse:
        """Restores ``req.actor`` on ``req.worker`` from the snapshot at ``req.snapshot_uri``: its
        durable dirs from the snapshot's volume tars, its memory too when the scope is FULL.

        Returns:
            The worker's IP, fetch (verify + extract), restore and probe seconds.

        Raises:
            AteletError: see the module doc.
        """
        actor = actor_key(req.actor)
        validate_spec(req.spec)
        self.images.resolve(req.spec.containers[0].image, "spec.containers[0].image")
        self.snapshots.check(req.snapshot_uri)
        worker = self.table.get(req.worker)
        async with worker.lock:
            already = await self._started_by(worker, actor, req.operation_id, "restore", req)
            if already is not None:
                return pb.RestoreResponse(worker_ip=worker.net.worker_ip, probe_seconds=already)
            with self.table.claim(worker, actor):
                if self.hollow:
                    worker.actor, worker.state, worker.operation = actor, "running", (req.operation_id, "restore")
                    return pb.RestoreResponse(worker_ip=worker.net.worker_ip)
                start = time.monotonic()
                async with self.snapshots.open_for_restore(req.snapshot_uri, req.manifest, worker.pool.sandbox_class,
                                                           self.table.runtime_version(worker)) as opened:
                    dest, manifest = opened.directory, opened.manifest
                    snapshot_files = {f.path for f in manifest.files}
                    actor_dir = self.layout.actor_dir(actor)
                    shutil.rmtree(actor_dir, ignore_errors=True)
                    for name, host_dir in self.layout.volume_dirs(actor, req.spec).items():
                        tar_rel = f"{VOLUMES_DIR}/{name}.tar"
                        if tar_rel in snapshot_files:
                            await asyncio.to_thread(extract_dir, dest / tar_rel, host_dir)
                    fetch = time.monotonic() - start
                    image_path = dest / CHECKPOINT_DIR if manifest.scope == pb.SNAPSHOT_SCOPE_FULL else None
                    boot, probe_s = await self.runner.boot(worker, actor, req.spec, image_path,
                                                           req.probe_timeout_seconds, (req.operation_id, "restore"))
                await failpoint("Atelet.restore.after_boot")
                log.info("restore %s/%s (%s) on %s: fetch %.3fs%s restore %.3fs probe %.3fs", *actor,
                         pb.SnapshotScope.Name(manifest.scope), worker.name, fetch,
                         " (cache hit)" if opened.cache_hit else "", boot, probe_s)
                return pb.RestoreResponse(worker_ip=worker.net.worker_ip, fetch_seconds=fetch,
                                          restore_seconds=boot, probe_seconds=probe_s,
                                          snapshot_cache_hit=opened.cache_hit)

    async def checkpoint(self, req: pb.CheckpointRequest) -> pb.CheckpointResponse:
        """Checkpoints ``req.actor`` on ``req.worker`` to ``req.snapshot_uri`` and frees the worker.

        Scope FULL saves the sandbox's memory (the sandbox exits) and its durable dirs; DATA stops
        the sandbox first and keeps only the durable dirs. A repeat of an operation that already
        wrote the snapshot answers its manifest.

        Returns:
            The manifest, its size in bytes, checkpoint and store seconds.

        Raises:
            AteletError: see the module doc.
        """
        actor = actor_key(req.actor)
        if req.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
            raise invalid("scope: must be SNAPSHOT_SCOPE_FULL or SNAPSHOT_SCOPE_DATA")
        self.snapshots.check(req.snapshot_uri)
        existing = await self.snapshots.existing(req.snapshot_uri)
        if existing is not None and existing.created_by_operation == req.operation_id:
            return pb.CheckpointResponse(manifest=existing, size_bytes=size_of(existing))
        if existing is not None:
            raise precondition(f"snapshot_uri: {req.snapshot_uri} already exists (written by operation "
                               f"{existing.created_by_operation})")
        worker = self.table.get(req.worker)
        async with worker.lock:
            if worker.actor != actor or worker.state != "running":
                raise precondition(f"worker {worker.name} runs {describe(worker.actor)} (state {worker.state}), "
                                   f"not a running {describe(actor)}")
            manifest = pb.SnapshotManifest(
                sandbox_class=worker.pool.sandbox_class, scope=req.scope, runsc_version=self.table.runtime_version(worker),
                actor=pb.ActorRef(atespace=actor[0], name=actor[1]), created_by_operation=req.operation_id)
            if self.hollow:
                self.table.free(worker)
                return pb.CheckpointResponse(manifest=manifest)
            assert worker.container_id is not None and worker.spec is not None
            target = self.snapshots.checkpoint_target(req.snapshot_uri)
            if target.location is not None:
                checkpoint_s, upload_s, manifest = await self._checkpoint_frozen(worker, actor, req.scope, target,
                                                                                 manifest)
            else:
                checkpoint_s, upload_s, manifest = await self._checkpoint_stopped(worker, actor, req.scope, target,
                                                                                  manifest)
            shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
            self.table.free(worker)
            size = size_of(manifest)
            log.info("checkpoint %s/%s (%s) from %s: %.3fs + store %.3fs, %d bytes", *actor,
                     pb.SnapshotScope.Name(req.scope), worker.name, checkpoint_s, upload_s, size)
            return pb.CheckpointResponse(manifest=manifest, size_bytes=size,
                                         checkpoint_seconds=checkpoint_s, upload_seconds=upload_s)

    def _compress(self, *, object_storage: bool) -> bool:
        """Whether a checkpoint's memory is compressed: under ``auto`` only on its way to object
        storage (bench/README.md, "activation": an uncompressed one restores faster from disk)."""
        if self.checkpoint_compression == "auto":
            return object_storage
        return self.checkpoint_compression != "none"

    async def _checkpoint_stopped(self, worker: Worker, actor: tuple[str, str], scope: int,
                                  target: CheckpointTarget, manifest: pb.SnapshotManifest
                                  ) -> tuple[float, float, pb.SnapshotManifest]:
        """A checkpoint to a directory on this node: FULL saves the sandbox (which exits), DATA
        stops it first so the durable dirs are quiet while archived; then the snapshot is stored.
        Returns (checkpoint seconds, store seconds, the completed manifest)."""
        assert worker.container_id is not None and worker.spec is not None
        driver = self.drivers[worker.pool.sandbox_class]
        staging = target.staging
        try:
            start = time.monotonic()
            full = scope == pb.SNAPSHOT_SCOPE_FULL
            if full:  # the sandbox exits once its state is saved
                await driver.checkpoint(worker.container_id, staging / CHECKPOINT_DIR,
                                             compress=self._compress(object_storage=False))
            await self.runner.stop(worker, already_exited=full)
            await self._archive_volumes(actor, worker.spec, staging)
            checkpoint_s = time.monotonic() - start
            start = time.monotonic()
            manifest = await target.commit(manifest)
            return checkpoint_s, time.monotonic() - start, manifest
        except BaseException:
            target.discard()
            if worker.container_id is not None:  # the checkpoint itself failed: still alive?
                if not await driver.alive(worker.container_id):
                    await self.runner.stop(worker, already_exited=True)
            raise

    async def _checkpoint_frozen(self, worker: Worker, actor: tuple[str, str], scope: int,
                                 target: CheckpointTarget, manifest: pb.SnapshotManifest
                                 ) -> tuple[float, float, pb.SnapshotManifest]:
        """A checkpoint to object storage, whose upload can fail: the sandbox is frozen, saved
        (FULL) while it stays frozen, its durable dirs archived, the snapshot uploaded; only then
        is the sandbox stopped. When anything fails it is thawed and runs on, so the actor goes
        back to RUNNING with its memory, never to a sandbox that is gone.
        Returns (checkpoint seconds, upload seconds, the completed manifest)."""
        assert worker.container_id is not None and worker.spec is not None
        cid = worker.container_id
        driver = self.drivers[worker.pool.sandbox_class]
        staging = target.staging
        start = time.monotonic()
        await driver.freeze(cid)
        try:
            if scope == pb.SNAPSHOT_SCOPE_FULL:
                await driver.checkpoint(cid, staging / CHECKPOINT_DIR, leave_running=True,
                                             compress=self._compress(object_storage=True))
            await self._archive_volumes(actor, worker.spec, staging)
            checkpoint_s = time.monotonic() - start
            manifest = await target.commit(manifest)
        except BaseException:
            target.discard()
            if await driver.alive(cid):
                await driver.thaw(cid)
            else:
                await self.runner.stop(worker, already_exited=True)
            raise
        upload_s = target.store_seconds
        try:
            await driver.thaw(cid)  # runsc signals no paused sandbox: thaw it, then stop it at once
        except AteletError as error:  # stopped all the same: the snapshot is stored
            log.warning("thaw of %s before its stop failed: %s", cid, error.reason)
        await self.runner.stop(worker)
        return checkpoint_s, upload_s, manifest

    async def _archive_volumes(self, actor: tuple[str, str], spec: pb.WorkloadSpec, staging: Path) -> None:
        """Each durable dir of the actor into ``staging/volumes/<name>.tar``."""
        for name, host_dir in self.layout.volume_dirs(actor, spec).items():
            await asyncio.to_thread(archive_dir, host_dir, staging / VOLUMES_DIR / f"{name}.tar")

    async def terminate(self, req: pb.TerminateRequest) -> pb.TerminateResponse:
        """Stops and deletes ``req.actor``'s sandbox on ``req.worker`` (running or exited) and its
        durable dirs, unless another worker of the node holds the actor now (they are its then);
        fine when the actor is not there. With ``req.started_by``, only a sandbox one of those
        Run/Restore operation IDs started (another one is left running: ``was_running`` False).

        Returns:
            ``was_running``: a running sandbox was stopped.

        Raises:
            AteletError: INVALID_ARGUMENT (actor), NOT_FOUND (worker), INTERNAL.
        """
        actor = actor_key(req.actor)
        worker = self.table.get(req.worker)
        async with worker.lock:
            if worker.actor != actor:
                return pb.TerminateResponse(was_running=False)
            started_by = worker.operation[0] if worker.operation else None
            if req.started_by and started_by not in req.started_by:
                log.info("terminate of %s/%s on %s skipped: its sandbox was started by %s, not by %s", *actor,
                         worker.name, started_by, " or ".join(req.started_by))
                return pb.TerminateResponse(was_running=False)
            was_running = worker.state == "running"
            if not self.hollow:
                await self.runner.stop(worker)
                if not self.table.elsewhere(worker, actor):
                    shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
            self.table.free(worker)
            return pb.TerminateResponse(was_running=was_running)

    async def _started_by(self, worker: Worker, actor: tuple[str, str], op_id: str, kind: str,
                          req: pb.RunRequest | pb.RestoreRequest) -> float | None:
        """When this very operation already started ``actor``'s sandbox on ``worker`` and it still
        runs (the atelet died before recording the response, then adopted the sandbox): probes it
        and returns the probe seconds (UNAVAILABLE when it does not answer 200 in time). None when
        the operation has yet to run here."""
        if worker.actor != actor or worker.operation != (op_id, kind) or worker.state != "running":
            return None
        log.info("%s %s: %s already runs on %s (started by this operation%s); probing it", kind, op_id,
                 describe(actor), worker.name, ", adopted after a restart" if worker.adopted else "")
        if self.hollow or worker.spec is None or not worker.spec.containers[0].wakeup_probe.port:
            return 0.0
        wp = worker.spec.containers[0].wakeup_probe
        return await probe.wait_ready(worker.net.worker_ip, wp.port, wp.path or "/",
                                      req.probe_timeout_seconds or DEFAULT_PROBE_TIMEOUT)
