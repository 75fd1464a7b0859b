"""Checkpoint: saving an actor's sandbox into a snapshot, and finishing a save whose caller
stopped waiting (the atelet was killed, or the call was cancelled).

A FULL save of a large actor takes seconds, and the sandbox does it by itself: when the atelet
was killed meanwhile, the sandbox still finished and exited, and the restarted atelet found it
gone, removed the unfinished staging directory and left the worker idle. The actor's memory was
lost although it had been saved (the chaos run of 2026-12-02 lost it 5 times of 5). So:

- Before the save starts, the worker records the checkpoint (``Worker.checkpoint``, a
  ``PendingCheckpoint`` in its record on disk), and the runtime's save runs detached from the
  atelet with its outcome in a journal (``SandboxDriver.checkpoint``).
- A restarted atelet adopts such a worker with its checkpoint and keeps its staging directory
  (``atelet.adoption``, ``Node.start``); a call cancelled while its save runs leaves the save
  running. In both cases the save is followed (``follow``) until its journal has the outcome:
  saved: the worker waits for the Checkpoint call's retry with the same operation ID (state
  ``exited`` when the save ended the sandbox, ``running`` and frozen on the object-storage path);
  failed: the staging directory is removed, a sandbox still alive is thawed and watched again
  (the retry saves it afresh), one that is gone leaves the worker ``exited``.
- The retry archives the durable dirs, commits the snapshot and frees the worker
  (``_finish_saved``); a retry after the commit frees a worker still holding it.

Two paths: to a directory on this node (``_checkpoint_stopped``: the save ends the sandbox) and
to object storage (``_checkpoint_frozen``: the sandbox stays held by ``pause_for_save`` until the
upload is done, and runs on when it fails). A sandbox frozen by Freeze (the hot tier,
``Worker.frozen``) is thawed first: a cgroup-frozen gVisor sentry cannot answer runsc's
checkpoint RPC. When the checkpoint then fails, the sandbox runs on, thawed (Health says so).
Every exec in the sandbox is ended before the save (``atelet.exec_ops``).

Errors: INVALID_ARGUMENT (scope, URI), NOT_FOUND (worker), FAILED_PRECONDITION (the worker does
not run the actor, the snapshot exists, another operation's save is held), UNAVAILABLE (a
connected socket blocked the save: retryable), INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from atelet.assignments import PendingCheckpoint
from atelet.drivers import Drivers
from atelet.errors import AteletError, invalid, precondition
from atelet.layout import NodeLayout
from atelet.output import keep_output
from atelet.proto import atelet_pb2 as pb
from atelet.sandbox import SandboxRunner
from atelet.snapshots.manifest import CHECKPOINT_DIR, OUTPUT_FILE, VOLUMES_DIR, size_of
from atelet.snapshots.places import CheckpointTarget, SnapshotPlaces
from atelet.snapshots.volumes import archive_dir
from atelet.spec import actor_key
from atelet.workers import Worker, WorkerTable, describe

log = logging.getLogger(__name__)

FOLLOW_TIMEOUT_SECONDS = 600.0
"""How long a save nobody waits for is followed before it counts as failed (runsc's own
checkpoint timeout is 300 s)."""

POLL_SECONDS = 0.1


class CheckpointOperations:
    """The Checkpoint RPC on the node's workers, and the saves it no longer waits for.

    Args:
        hollow: benchmark mode: accept calls, run no sandbox.
        table: the workers.
        layout: actor dirs, volume dirs, the workers' checkpoint journals.
        snapshots: writes the snapshots, on disk and in object storage.
        drivers: the runtime of each sandbox class.
        runner: stops the sandboxes; its exit watcher is re-armed when a save failed.
        checkpoint_compression: ``auto`` (compress only what goes to object storage), ``none``
            or ``flate-best-speed`` (see AteletSettings).
    """

    def __init__(self, hollow: bool, table: WorkerTable, layout: NodeLayout, snapshots: SnapshotPlaces,
                 drivers: Drivers, runner: SandboxRunner, checkpoint_compression: str = "auto") -> None:
        self.hollow = hollow
        self.table = table
        self.layout = layout
        self.snapshots = snapshots
        self.drivers = drivers
        self.runner = runner
        self.checkpoint_compression = checkpoint_compression
        # Around a checkpoint: refuses a worker's new outbound connections through the egress
        # proxy and waits for the open ones to close, cutting them at its timeout; yields
        # (seconds waited, connections cut). Set by the node when it runs one.
        self.egress_drain: Callable[[str], contextlib.AbstractAsyncContextManager[tuple[float, int]]] | None = None
        # Ends every exec in the worker's sandbox (``ExecOperations.end``) before it is saved: an
        # exec'd process must not be saved into the snapshot. Set by the node.
        self.end_execs: Callable[[str, str], Awaitable[int]] | None = None
        # Ships the actor's output printed so far (``OutputCollector.flush``) before it is saved,
        # while the actor is still placed here. Set by the atelet's main.
        self.flush_output: Callable[[tuple[str, str]], Awaitable[None]] | None = None

    async def checkpoint(self, req: pb.CheckpointRequest) -> pb.CheckpointResponse:
        """Checkpoints ``req.actor`` on ``req.worker`` to ``req.snapshot_uri`` and frees the worker.

        Scope FULL saves the sandbox's memory (the sandbox exits) and its durable dirs; DATA stops
        the sandbox first and keeps only the durable dirs. A repeat of an operation that already
        wrote the snapshot answers its manifest; a repeat of one whose save finished without it
        (see the module doc) completes that save.

        Returns:
            The manifest, its size, checkpoint and store seconds.

        Raises:
            AteletError: see the module doc.
        """
        actor = actor_key(req.actor)
        if req.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
            raise invalid("scope: must be SNAPSHOT_SCOPE_FULL or SNAPSHOT_SCOPE_DATA")
        self.snapshots.check(req.snapshot_uri)
        worker = self.table.get(req.worker)
        existing = await self.snapshots.existing(req.snapshot_uri)
        if existing is not None and existing.created_by_operation == req.operation_id:
            await self._release_committed(worker, actor, req.operation_id)
            return pb.CheckpointResponse(manifest=existing, size_bytes=size_of(existing))
        if existing is not None:
            raise precondition(f"snapshot_uri: {req.snapshot_uri} already exists (written by operation "
                               f"{existing.created_by_operation})")
        async with self._settled(worker):
            pending = worker.checkpoint
            if pending is not None and pending.saved and worker.actor == actor:
                if (pending.operation_id, pending.snapshot_uri) != (req.operation_id, req.snapshot_uri):
                    raise precondition(
                        f"worker {worker.name} holds the saved memory of {describe(actor)} for operation "
                        f"{pending.operation_id} ({pending.snapshot_uri}); only that operation can complete it")
                return await self._finish_saved(worker, actor, pending)
            if worker.actor != actor or worker.state != "running":
                raise precondition(f"worker {worker.name} runs {describe(worker.actor)} (state {worker.state}), "
                                   f"not a running {describe(actor)}")
            manifest = self._manifest(worker, actor, req.scope, req.operation_id)
            if self.hollow:
                self.table.free(worker)
                return pb.CheckpointResponse(manifest=manifest)
            assert worker.container_id is not None and worker.spec is not None
            if worker.frozen:
                how = await self.drivers[worker.pool.sandbox_class].thaw_in_place(worker.container_id)
                worker.frozen = False
                self.table.persist(worker)
                log.info("checkpoint %s: thawed the frozen sandbox of %s on %s first (%s)", req.operation_id,
                         describe(actor), worker.name, how or "it ran")
            if self.end_execs is not None:
                await self.end_execs(worker.name, "suspended")
            if self.flush_output is not None:
                await self.flush_output(actor)
            drained = self.egress_drain(worker.name) if self.egress_drain else contextlib.nullcontext((0.0, 0))
            async with drained as (egress_wait, egress_cut):
                target = self.snapshots.checkpoint_target(req.snapshot_uri)
                if target.location is not None:
                    checkpoint_s, upload_s, manifest = await self._checkpoint_frozen(worker, actor, req, target,
                                                                                     manifest)  # fmt: skip
                else:
                    checkpoint_s, upload_s, manifest = await self._checkpoint_stopped(worker, actor, req, target,
                                                                                      manifest)  # fmt: skip
            done = self._freed(worker, actor, manifest, checkpoint_s, upload_s)
            done.egress_wait_seconds, done.egress_cut = egress_wait, egress_cut
            return done

    def _manifest(self, worker: Worker, actor: tuple[str, str], scope: int, operation_id: str) -> pb.SnapshotManifest:
        """The manifest of a checkpoint of ``actor`` on ``worker`` before its files are hashed."""
        return pb.SnapshotManifest(
            sandbox_class=worker.pool.sandbox_class, scope=pb.SnapshotScope.Name(scope),
            runsc_version=self.table.runtime_version(worker), actor=pb.ActorRef(atespace=actor[0], name=actor[1]),
            created_by_operation=operation_id)

    def _freed(self, worker: Worker, actor: tuple[str, str], manifest: pb.SnapshotManifest,
               checkpoint_s: float, upload_s: float) -> pb.CheckpointResponse:
        """Frees the worker (and the actor's durable dirs, now in the snapshot) after a commit."""
        shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
        self.table.free(worker)
        size = size_of(manifest)
        log.info("checkpoint %s/%s (%s) from %s: %.3fs + store %.3fs, %d bytes", *actor,
                 pb.SnapshotScope.Name(manifest.scope), worker.name, checkpoint_s, upload_s, size)
        return pb.CheckpointResponse(manifest=manifest, size_bytes=size,
                                     checkpoint_seconds=checkpoint_s, upload_seconds=upload_s)

    @contextlib.asynccontextmanager
    async def _settled(self, worker: Worker) -> AsyncIterator[None]:
        """Holds ``worker.lock`` once no save of the worker is being followed (``follow``)."""
        while True:
            settling = worker.settling
            if settling is not None and not settling.done():
                await asyncio.wait({settling})
                continue
            await worker.lock.acquire()
            if worker.settling is None or worker.settling.done():
                break
            worker.lock.release()
        try:
            yield
        finally:
            worker.lock.release()

    def _compress(self, *, object_storage: bool) -> bool:
        """Whether a checkpoint's memory is compressed: under ``auto`` only on its way to object
        storage (bench/README.md, "activation": an uncompressed one restores faster from disk)."""
        if self.checkpoint_compression == "auto":
            return object_storage
        return self.checkpoint_compression != "none"

    def _begin(self, worker: Worker, req: pb.CheckpointRequest, target: CheckpointTarget, *,
               leave_running: bool, saved: bool = False) -> PendingCheckpoint | None:
        """Records the checkpoint on the worker (and its record on disk) before anything is saved;
        the journal of an earlier save is emptied first, so it cannot be taken for this one's.
        None (nothing recorded) when the worker's driver cannot follow a save it did not wait for
        (``SandboxDriver.follows_saves``: a microvm's save ends with the atelet)."""
        if not self.drivers[worker.pool.sandbox_class].follows_saves:
            return None
        journal = self.layout.checkpoint_journal(worker.name)
        shutil.rmtree(journal, ignore_errors=True)
        pending = PendingCheckpoint(operation_id=req.operation_id, snapshot_uri=req.snapshot_uri, scope=req.scope,
                                    staging=str(target.staging), journal=str(journal), leave_running=leave_running,
                                    saved=saved)
        worker.checkpoint = pending
        self.table.persist(worker)
        return pending

    async def _checkpoint_stopped(self, worker: Worker, actor: tuple[str, str], req: pb.CheckpointRequest,
                                  target: CheckpointTarget, manifest: pb.SnapshotManifest
                                  ) -> tuple[float, float, pb.SnapshotManifest]:
        """A checkpoint to a directory on this node: FULL saves the sandbox (which exits), DATA
        stops it first so the durable dirs are quiet while archived; then the snapshot is stored.
        Once a FULL save succeeded a failure keeps it for the retry (``_finish_saved``).
        Returns (checkpoint seconds, store seconds, the completed manifest)."""
        assert worker.container_id is not None and worker.spec is not None
        driver = self.drivers[worker.pool.sandbox_class]
        full = req.scope == pb.SNAPSHOT_SCOPE_FULL
        pending = self._begin(worker, req, target, leave_running=False) if full else None
        start = time.monotonic()
        try:
            if full:  # the sandbox exits once its state is saved
                await driver.checkpoint(worker.container_id, target.staging / CHECKPOINT_DIR,
                                        compress=self._compress(object_storage=False), journal=_journal(pending))
                if pending is not None:
                    pending.saved = True
            await self.runner.stop(worker, already_exited=full)
        except BaseException as error:
            if pending is not None and isinstance(error, asyncio.CancelledError):
                self.follow(worker)  # the save goes on without this call
                raise
            target.discard()
            worker.checkpoint = None
            if worker.container_id is not None and not await driver.alive(worker.container_id):
                await self.runner.stop(worker, already_exited=True)  # the checkpoint itself failed: still alive?
            self.table.persist(worker)
            raise
        try:
            await self._archive_volumes(actor, worker.spec, target.staging, worker.output_start)
            checkpoint_s = time.monotonic() - start
            start = time.monotonic()
            manifest = await target.commit(manifest)
        except BaseException:
            if pending is None:
                target.discard()
            else:  # the memory is saved: the retry stores it
                self.table.persist(worker)
            raise
        return checkpoint_s, time.monotonic() - start, manifest

    async def _checkpoint_frozen(self, worker: Worker, actor: tuple[str, str], req: pb.CheckpointRequest,
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
        full = req.scope == pb.SNAPSHOT_SCOPE_FULL
        pending = self._begin(worker, req, target, leave_running=True, saved=not full)
        start = time.monotonic()
        try:
            await driver.pause_for_save(cid)
            if full:
                await driver.checkpoint(cid, target.staging / CHECKPOINT_DIR, leave_running=True,
                                        compress=self._compress(object_storage=True), journal=_journal(pending))
                if pending is not None:
                    pending.saved = True
        except asyncio.CancelledError:
            if pending is None:
                await self._abandon(worker, target)
            else:
                self.follow(worker)
            raise
        except BaseException:
            await self._abandon(worker, target)
            raise
        try:
            await self._archive_volumes(actor, worker.spec, target.staging, worker.output_start)
            checkpoint_s = time.monotonic() - start
            manifest = await target.commit(manifest)
        except BaseException:
            await self._abandon(worker, target)
            raise
        await self._stop_frozen(worker)
        return checkpoint_s, target.store_seconds, manifest

    async def _abandon(self, worker: Worker, target: CheckpointTarget) -> None:
        """After a failed checkpoint of the object-storage path: the staging directory goes, the
        sandbox is thawed and runs on (or the worker says it exited)."""
        target.discard()
        worker.checkpoint = None
        cid = worker.container_id
        driver = self.drivers[worker.pool.sandbox_class]
        if cid is not None and await driver.alive(cid):
            await driver.resume_after_save(cid)
            self.table.persist(worker)
        else:
            await self.runner.stop(worker, already_exited=True)

    async def _stop_frozen(self, worker: Worker) -> None:
        """Stops the frozen sandbox of a committed checkpoint: runsc signals no paused sandbox, so
        it is thawed first; stopped all the same when that fails (the snapshot is stored)."""
        cid = worker.container_id
        if cid is None:
            return
        try:
            await self.drivers[worker.pool.sandbox_class].resume_after_save(cid)
        except AteletError as error:
            log.warning("thaw of %s before its stop failed: %s", cid, error.reason)
        await self.runner.stop(worker)

    async def _archive_volumes(self, actor: tuple[str, str], spec: pb.WorkloadSpec, staging: Path,
                               output_start: int = 0) -> None:  # fmt: skip
        """Each durable dir of the actor into ``staging/volumes/<name>.tar``; with a FULL save
        (``staging/checkpoint`` there), the newest output of the saved sandbox (its log file from
        byte ``output_start``) into ``staging/output.log``."""
        for name, host_dir in self.layout.volume_dirs(actor, spec).items():
            await asyncio.to_thread(archive_dir, host_dir, staging / VOLUMES_DIR / f"{name}.tar")
        if (staging / CHECKPOINT_DIR).is_dir():
            await asyncio.to_thread(keep_output, self.layout.log_path(actor), output_start, staging / OUTPUT_FILE)

    # ---- saves nobody waits for ------------------------------------------------------------

    def follow(self, worker: Worker) -> None:
        """Follows the save of ``worker.checkpoint`` in the background until its outcome is known
        (see the module doc); a Checkpoint call on the worker waits for it."""
        assert worker.checkpoint is not None
        worker.settling = asyncio.create_task(self._settle(worker, worker.checkpoint),
                                              name=f"follow checkpoint on {worker.name}")

    async def _settle(self, worker: Worker, pending: PendingCheckpoint) -> None:
        """The body of ``follow``: never raises (a failure is logged)."""
        try:
            failure = None if pending.saved else await self._outcome(worker, pending)
            async with worker.lock:
                if worker.checkpoint is pending:
                    if failure is None:
                        await self._keep_saved(worker, pending)
                    else:
                        await self._drop_failed(worker, pending, failure)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("following the checkpoint %s on %s failed", pending.operation_id, worker.name)

    async def _outcome(self, worker: Worker, pending: PendingCheckpoint) -> str | None:
        """Waits for the save's journal: None when it succeeded, else why it failed."""
        driver = self.drivers[worker.pool.sandbox_class]
        deadline = time.monotonic() + FOLLOW_TIMEOUT_SECONDS
        while True:
            try:
                if await driver.checkpoint_done(Path(pending.journal)):
                    return None
            except AteletError as error:
                return error.reason
            if time.monotonic() > deadline:
                return f"it did not finish within {FOLLOW_TIMEOUT_SECONDS:.0f} s"
            await asyncio.sleep(POLL_SECONDS)

    async def _keep_saved(self, worker: Worker, pending: PendingCheckpoint) -> None:
        """The save succeeded: the worker holds it for the retry of its operation."""
        pending.saved = True
        await self.runner.exits.unwatch(worker)
        cid = worker.container_id
        driver = self.drivers[worker.pool.sandbox_class]
        if not pending.leave_running and cid is not None:
            await self.runner.stop(worker, already_exited=not await driver.alive(cid))
        if worker.state == "exited":
            worker.exit_reason = (f"saved by checkpoint {pending.operation_id}; that operation's retry stores the "
                                  f"snapshot")
        self.table.persist(worker)
        log.warning("checkpoint %s of %s on %s finished without its caller; kept for its retry",
                    pending.operation_id, describe(worker.actor), worker.name)

    async def _drop_failed(self, worker: Worker, pending: PendingCheckpoint, failure: str) -> None:
        """The save failed: its files go; a sandbox still alive runs on (thawed, watched), one
        that is gone leaves the worker ``exited``."""
        shutil.rmtree(pending.staging, ignore_errors=True)
        worker.checkpoint = None
        cid = worker.container_id
        driver = self.drivers[worker.pool.sandbox_class]
        why = ""
        if cid is not None and await driver.alive(cid):
            if pending.leave_running:
                with contextlib.suppress(AteletError):
                    await driver.resume_after_save(cid)
            if worker.adopted:
                why = await driver.reattach(cid, worker.net, {cid})
            if not why:
                worker.state = "running"
                self.runner.exits.watch(worker)
                self.table.persist(worker)
                log.warning("checkpoint %s of %s on %s failed (%s); the sandbox runs on", pending.operation_id,
                            describe(worker.actor), worker.name, failure)
                return
        await self.runner.stop(worker, already_exited=not why)
        worker.exit_reason = f"the sandbox ended during a checkpoint that failed: {why or failure}"
        self.table.persist(worker)
        log.warning("checkpoint %s of %s on %s failed and the sandbox is gone: %s", pending.operation_id,
                    describe(worker.actor), worker.name, why or failure)

    async def _finish_saved(self, worker: Worker, actor: tuple[str, str],
                            pending: PendingCheckpoint) -> pb.CheckpointResponse:
        """The retry of a checkpoint whose save finished without its caller: archives the durable
        dirs, commits the snapshot, stops a frozen sandbox and frees the worker."""
        assert worker.spec is not None
        target = self.snapshots.checkpoint_target(pending.snapshot_uri, Path(pending.staging))
        manifest = self._manifest(worker, actor, pending.scope, pending.operation_id)
        log.info("completing checkpoint %s of %s on %s, saved before", pending.operation_id, describe(actor),
                 worker.name)
        start = time.monotonic()
        try:
            await self._archive_volumes(actor, worker.spec, target.staging, worker.output_start)
            manifest = await target.commit(manifest)
        except BaseException:
            if pending.leave_running:
                await self._abandon(worker, target)
                if worker.state == "running":
                    self.runner.exits.watch(worker)
            raise
        await self._stop_frozen(worker)
        return self._freed(worker, actor, manifest, 0.0, time.monotonic() - start)

    async def _release_committed(self, worker: Worker, actor: tuple[str, str], operation_id: str) -> None:
        """A retry after the commit: a worker still holding that checkpoint (the atelet died before
        it freed it) stops its sandbox and is freed."""
        async with self._settled(worker):
            pending = worker.checkpoint
            if pending is None or worker.actor != actor or pending.operation_id != operation_id:
                return
            await self._stop_frozen(worker)
            shutil.rmtree(pending.staging, ignore_errors=True)
            shutil.rmtree(self.layout.actor_dir(actor), ignore_errors=True)
            self.table.free(worker)


def _journal(pending: PendingCheckpoint | None) -> Path | None:
    """Where the save of ``pending`` is recorded (None: not followed)."""
    return Path(pending.journal) if pending is not None else None
