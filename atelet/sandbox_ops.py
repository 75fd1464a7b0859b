"""What Run, Restore and Terminate do to a worker's sandbox (Checkpoint: ``atelet.checkpoint_ops``).

Each method is the body of one RPC; ``Node`` runs it through the operation log (``atelet.oplog``)
and counts it in the worker's ``inflight``. Each takes the worker's lock for the whole change.
A Run/Restore repeated with the operation ID that started the sandbox now running on the worker
(the atelet died before it recorded the response, then adopted the sandbox) probes that sandbox
and answers success instead of starting a second one.

Errors: INVALID_ARGUMENT (spec, URIs, names), NOT_FOUND (unknown worker, no snapshot),
FAILED_PRECONDITION (worker busy with another actor, actor not on the worker, snapshot exists,
manifest mismatch), UNAVAILABLE (probe timeout, the actor runs on another worker of the node:
``WorkerTable.claim``), INTERNAL.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time

from atelet import probe
from atelet.drivers import Drivers
from atelet.images import ImageStore
from atelet.layout import NodeLayout
from atelet.output import inherit
from atelet.proto import atelet_pb2 as pb
from atelet.sandbox import DEFAULT_PROBE_TIMEOUT, SandboxRunner
from atelet.snapshots.manifest import CHECKPOINT_DIR, OUTPUT_FILE, VOLUMES_DIR
from atelet.snapshots.places import SnapshotPlaces
from atelet.snapshots.volumes import extract_dir
from atelet.spec import actor_key, validate_spec
from atelet.workers import Worker, WorkerTable, describe
from domain.failpoints import failpoint

log = logging.getLogger(__name__)


class SandboxOperations:
    """Run, Restore and Terminate on the node's workers.

    Args:
        hollow: benchmark mode: accept calls, run no sandbox.
        table: the workers.
        layout: actor dirs and volume dirs.
        images: validates image references.
        snapshots: reads and writes the snapshots, on disk and in object storage.
        drivers: the runtime of each sandbox class (a worker's is its pool's class's).
        runner: boots and stops the sandboxes.
    """

    def __init__(self, hollow: bool, table: WorkerTable, layout: NodeLayout, images: ImageStore,
                 snapshots: SnapshotPlaces, drivers: Drivers, runner: SandboxRunner) -> None:
        self.hollow = hollow
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
        self.images.check(req.spec.containers[0].image, "spec.containers[0].image")
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
        self.images.check(req.spec.containers[0].image, "spec.containers[0].image")
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
                    if image_path is not None and OUTPUT_FILE in snapshot_files and \
                            (manifest.actor.atespace, manifest.actor.name) != actor:  # fmt: skip
                        # another actor's save (a golden snapshot): its process printed these lines
                        await asyncio.to_thread(inherit, dest / OUTPUT_FILE, self.layout.log_path(actor))
                    notice = req.notice if req.HasField("notice") else None
                    boot, probe_s = await self.runner.boot(worker, actor, req.spec, image_path,
                                                           req.probe_timeout_seconds, (req.operation_id, "restore"),
                                                           notice)
                await failpoint("Atelet.restore.after_boot")
                log.info("restore %s/%s (%s) on %s: fetch %.3fs%s restore %.3fs probe %.3fs", *actor,
                         pb.SnapshotScope.Name(manifest.scope), worker.name, fetch,
                         " (cache hit)" if opened.cache_hit else "", boot, probe_s)
                return pb.RestoreResponse(worker_ip=worker.net.worker_ip, fetch_seconds=fetch,
                                          restore_seconds=boot, probe_seconds=probe_s,
                                          snapshot_cache_hit=opened.cache_hit)

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
            if worker.checkpoint is not None:  # a save nobody will complete now
                shutil.rmtree(worker.checkpoint.staging, ignore_errors=True)
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
        if worker.frozen:  # it answered its probe before it was frozen; a frozen one cannot
            log.info("%s %s: %s is frozen on %s; not probed", kind, op_id, describe(actor), worker.name)
            return 0.0
        wp = worker.spec.containers[0].wakeup_probe
        return await probe.wait_ready(worker.net.worker_ip, wp.port, wp.path or "/",
                                      req.probe_timeout_seconds or DEFAULT_PROBE_TIMEOUT)
