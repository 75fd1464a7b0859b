"""The node's workers and the sandbox that runs on each: Run, Restore, Checkpoint, Terminate,
DeleteSnapshot, CopySnapshot, exit watching and fencing.

Each worker is one network namespace (``atelet.netns``) that runs at most one actor's sandbox at a
time, guarded by a per-worker asyncio lock. Every mutating call goes through the operation log
(``atelet.oplog``): a repeat of a completed operation_id returns the recorded response, a repeat
of a running one waits for it.

On-disk layout under ``state_dir``::

    runsc/                         runsc --root
    images/<digest>/               unpacked images (shared, never written by sandboxes)
    operations/<sha256>.json       started and completed operations
    workers/<worker>/bundle/       OCI bundle of the worker's current sandbox
    workers/<worker>/assignment.json   what runs on the worker (``atelet.assignments``)
    actors/<atespace>/<name>/volumes/<volume>/   durable dirs (bind-mounted into the sandbox)
    logs/<atespace>/<name>.log     sandbox output (runsc's stdout/stderr)
    local-snapshots/<path>/        LOCAL snapshots, ``local:///<path>`` (unless ``local_snapshot_root`` is set)

A sandbox that exits on its own (crash, OOM kill; not one the atelet stopped) is noticed by a
watch task (``atelet.watch``), measured 5-100 ms after the kill: the worker's state becomes
``exited`` (its actor, durable dirs and log are kept until a Terminate; the dead sandbox itself is
deleted from runsc) and ``on_exit(worker, actor, reason)`` is called once. ``fence`` terminates a sandbox at the control plane's request, unless an operation is in
flight on its worker.

Errors: INVALID_ARGUMENT (spec, URIs, names), NOT_FOUND (unknown worker, no snapshot),
FAILED_PRECONDITION (worker busy with another actor, actor not on the worker, snapshot exists,
manifest mismatch), UNAVAILABLE (probe timeout, checkpoint blocked), INTERNAL.

Restarts: runsc sandboxes are detached and outlive the atelet process. Whenever what runs on a
worker changes, it is persisted (``atelet.assignments``). ``start`` adopts every recorded sandbox
that still runs: the worker is running that actor again (exit watch re-armed, shown in Health
and heartbeats), and its network namespace is left as it is (only the host end's address is
re-applied). A recorded sandbox that is gone or stopped is deleted and its worker reported idle
(its durable dirs are kept); sandboxes no record names are deleted. A Run/Restore repeated with
the operation ID that started an adopted sandbox (the atelet died before it recorded the
response) probes that sandbox and answers success instead of starting a second one.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import Message

from atelet import metrics, netns, probe
from atelet.assignments import Assignment, AssignmentStore
from atelet.drivers.base import SandboxDriver
from atelet.drivers.gvisor import GVisorDriver
from atelet.errors import AteletError, invalid, not_found, precondition
from atelet.images import ImageStore
from atelet.oplog import OperationLog
from atelet.pool import PoolSpec
from atelet.proto import atelet_pb2 as pb
from atelet.settings import AteletSettings
from atelet.snapshots.manifest import CHECKPOINT_DIR, VOLUMES_DIR
from atelet.snapshots.store import SnapshotStore
from atelet.snapshots.volumes import archive_dir, extract_dir
from atelet.spec import actor_key, validate_spec
from domain.failpoints import failpoint

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
DEFAULT_PROBE_TIMEOUT = 30.0


@dataclass
class Worker:
    """One worker slot: its pool, network and what runs on it (``actor`` None = idle)."""

    name: str
    pool: PoolSpec
    index: int
    net: netns.WorkerNet
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    actor: tuple[str, str] | None = None
    container_id: str | None = None
    state: str = "idle"  # idle | running | exited
    spec: pb.WorkloadSpec | None = None
    exit_reason: str = ""  # how the sandbox ended, when state is "exited" on its own
    watcher: asyncio.Task[None] | None = None  # the exit watch of the running sandbox
    inflight: int = 0  # Run/Restore/Checkpoint/Terminate calls in flight on this worker
    operation: tuple[str, str] | None = None  # (operation_id, kind) of the Run/Restore that started it
    started_at: float = 0.0
    adopted: bool = False  # the sandbox was started by an earlier atelet process

    def free(self) -> None:
        """Marks the worker idle (nothing runs on it); ``Node._free`` also forgets its record."""
        self.actor = None
        self.container_id = None
        self.state = "idle"
        self.spec = None
        self.exit_reason = ""
        self.operation = None
        self.started_at = 0.0
        self.adopted = False


def _fmt(actor: tuple[str, str] | None) -> str:
    return "nothing" if actor is None else f"actor {actor[0]}/{actor[1]}"


class Node:
    """All workers of this node plus the stores they use. Call ``start`` before use, ``stop`` after."""

    def __init__(self, settings: AteletSettings, pools: list[PoolSpec]) -> None:
        self.settings = settings
        self.state_dir = Path(settings.state_dir).resolve()
        self.images = ImageStore(settings.image_roots, self.state_dir / "images")
        self.driver: SandboxDriver = GVisorDriver(settings.runsc, self.state_dir / "runsc", self.images)
        self.snapshots = SnapshotStore(settings.snapshot_roots, settings.local_snapshot_dir)
        self.ops = OperationLog(self.state_dir / "operations")
        self.assignments = AssignmentStore(self.state_dir / "workers")
        self.pools = pools
        self.workers: dict[str, Worker] = {}
        index = 0
        for pool in pools:
            for i in range(pool.replicas):
                name = f"{pool.name}-{i}"
                self.workers[name] = Worker(name, pool, index, netns.plan(settings.node, name, index, settings.subnet))
                index += 1
        self.runsc_version = ""
        self._deleting: set[asyncio.Task[None]] = set()
        self._detached: set[asyncio.Task[Any]] = set()  # exit watches past their sandbox's death
        # Called once per sandbox that exits on its own: (worker name, actor, one-line reason).
        self.on_exit: Callable[[str, tuple[str, str], str], None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Creates dirs, adopts the sandboxes of a previous run that still run (see the module doc),
        removes the other leftovers, creates every other worker's namespace."""
        for sub in ("runsc", "images", "operations", "workers", "actors", "logs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        for root in self.snapshots.roots:
            root.mkdir(parents=True, exist_ok=True)
        assert self.snapshots.local_root is not None
        self.snapshots.local_root.mkdir(parents=True, exist_ok=True)
        for leftover in await asyncio.to_thread(self.snapshots.remove_local_staging):
            log.warning("removed %s: a local snapshot the previous atelet did not finish", leftover)
        if self.settings.hollow:
            self.runsc_version = "hollow"
        else:
            self.runsc_version = await self.driver.version()
            for op_id, kind in self.ops.in_flight():
                log.warning("operation %s (%s) was in flight when the previous atelet stopped", op_id, kind)
            listed = await self.driver.list()
            adopted: set[str] = set()
            for name, record in self.assignments.load_all().items():
                if await self._adopt(name, record, set(listed)):
                    assert record.container_id is not None
                    adopted.add(record.container_id)
                else:
                    self.assignments.remove(name)
            for cid in listed:
                if cid not in adopted:
                    log.warning("removing leftover sandbox %s from a previous run", cid)
                    await self.driver.delete(cid)
            await asyncio.gather(*(netns.create(w.net) for w in self.workers.values() if not w.adopted))
        self._update_metrics()

    async def _adopt(self, name: str, record: Assignment, listed: set[str]) -> bool:
        """Takes over the sandbox ``record`` names if it still runs and its network is intact."""
        worker = self.workers.get(name)
        what = f"sandbox {record.container_id} of {_fmt(record.actor)} on {name}"
        why = ""
        if worker is None:
            why = "no such worker any more"
        elif record.net != worker.net:
            why = f"the worker's network changed ({record.net.worker_ip} -> {worker.net.worker_ip})"
        elif record.state != "running" or not record.container_id:
            why = f"it had {record.state} before the restart"
        else:
            why = await self.driver.reattach(record.container_id, record.net, listed)
        if why or worker is None:
            log.warning("not adopting %s: %s; the worker is idle (durable dirs kept)", what, why)
            return False
        worker.actor, worker.spec, worker.container_id = record.actor, record.spec, record.container_id
        worker.state, worker.exit_reason, worker.adopted = "running", "", True
        worker.operation = (record.operation_id, record.operation_kind)
        worker.started_at = record.started_at
        self._watch(worker)
        self._persist(worker)
        log.warning("adopted %s (started by operation %s, %s)", what, record.operation_id, record.operation_kind)
        return True

    async def stop(self) -> None:
        """Terminates every sandbox and deletes every namespace this node created."""
        await self.ops.drain()
        for worker in self.workers.values():
            async with worker.lock:
                if not self.settings.hollow:
                    await self._stop_sandbox(worker)
                self._free(worker)
        await asyncio.gather(*self._deleting, return_exceptions=True)
        for worker in self.workers.values():
            await self._unwatch(worker)
        if self._detached:  # sandboxes that exited just before: let their events out (they end soon)
            await asyncio.wait(set(self._detached), timeout=self.driver.exit_grace_seconds + 1)
            for task in list(self._detached):
                task.cancel()
            await asyncio.gather(*self._detached, return_exceptions=True)
        if not self.settings.hollow:
            for cid in await self.driver.list():
                await self.driver.delete(cid)
            await asyncio.gather(*(netns.destroy(w.net) for w in self.workers.values()))
        self._update_metrics()

    # ---- helpers ---------------------------------------------------------------------------

    def _worker(self, name: str) -> Worker:
        worker = self.workers.get(name)
        if worker is None:
            raise not_found(f"worker: no worker {name!r} on node {self.settings.node} "
                            f"(workers: {', '.join(self.workers) or 'none'})")
        return worker

    def _persist(self, worker: Worker) -> None:
        """Records what runs on ``worker`` (removes the record when it is idle); not in hollow mode."""
        if self.settings.hollow:
            return
        if worker.actor is None or worker.spec is None or worker.operation is None:
            self.assignments.remove(worker.name)
            return
        self.assignments.save(Assignment(
            worker=worker.name, actor=worker.actor, container_id=worker.container_id, state=worker.state,
            net=worker.net, spec=worker.spec, operation_id=worker.operation[0],
            operation_kind=worker.operation[1], durable_dir=str(self._actor_dir(worker.actor)),
            volumes={k: str(v) for k, v in self._volume_dirs(worker.actor, worker.spec).items()},
            log=str(self._log_path(worker.actor)), bundle=str(self.state_dir / "workers" / worker.name / "bundle"),
            exit_reason=worker.exit_reason, runsc_version=self.runsc_version, started_at=worker.started_at,
        ))

    def _free(self, worker: Worker) -> None:
        """Marks the worker idle and forgets its record."""
        worker.free()
        self._persist(worker)

    def _update_metrics(self) -> None:
        metrics.set_workers((w.pool.name, w.state) for w in self.workers.values())

    def _actor_dir(self, actor: tuple[str, str]) -> Path:
        return self.state_dir / "actors" / actor[0] / actor[1]

    def _log_path(self, actor: tuple[str, str]) -> Path:
        return self.state_dir / "logs" / actor[0] / f"{actor[1]}.log"

    @contextmanager
    def _inflight(self, worker_name: str) -> Iterator[None]:
        worker = self.workers.get(worker_name)
        if worker is not None:
            worker.inflight += 1
        try:
            yield
        finally:
            if worker is not None:
                worker.inflight -= 1

    async def _measured(self, kind: str, op_id: str, response_type: type[M], fn: Callable[[], Awaitable[M]],
                        worker_name: str = "", *, record: bool = True) -> M:
        """Runs ``fn`` through the operation log (``record``) or directly, counted in the worker's
        ``inflight`` for as long as it runs (the log shields it from the caller's cancellation)."""
        async def tracked() -> M:
            with self._inflight(worker_name):
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
            self._update_metrics()

    async def _started_by(self, worker: Worker, actor: tuple[str, str], op_id: str, kind: str,
                          req: pb.RunRequest | pb.RestoreRequest) -> float | None:
        """When this very operation already started ``actor``'s sandbox on ``worker`` and it still
        runs (the atelet died before recording the response, then adopted the sandbox): probes it
        and returns the probe seconds (UNAVAILABLE when it does not answer 200 in time). None when
        the operation has yet to run here."""
        if worker.actor != actor or worker.operation != (op_id, kind) or worker.state != "running":
            return None
        log.info("%s %s: %s already runs on %s (started by this operation%s); probing it", kind, op_id,
                 _fmt(actor), worker.name, ", adopted after a restart" if worker.adopted else "")
        if self.settings.hollow or worker.spec is None or not worker.spec.containers[0].wakeup_probe.port:
            return 0.0
        wp = worker.spec.containers[0].wakeup_probe
        return await probe.wait_ready(worker.net.worker_ip, wp.port, wp.path or "/",
                                      req.probe_timeout_seconds or DEFAULT_PROBE_TIMEOUT)

    def _claim(self, worker: Worker, actor: tuple[str, str]) -> None:
        if worker.actor is not None:
            raise precondition(f"worker {worker.name} is busy: it runs {_fmt(worker.actor)} "
                               f"(state {worker.state}), wanted it for {_fmt(actor)}")

    async def _stop_sandbox(self, worker: Worker, *, already_exited: bool = False) -> bool:
        """Stops the worker's sandbox if any (True when one existed); ``runsc delete`` then runs in
        the background, since the sandbox is already dead and delete may wait ~1 s for its reaping."""
        await self._unwatch(worker)
        cid = worker.container_id
        if cid is None:
            return False
        existed = True
        if not already_exited:
            existed = await self.driver.kill(cid)
        worker.container_id = None
        worker.state = "exited" if worker.actor else "idle"
        self._persist(worker)
        task = asyncio.create_task(self.driver.delete_quietly(cid))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)
        return existed

    async def _unwatch(self, worker: Worker) -> None:
        """Cancels the worker's exit watch (the atelet is about to stop the sandbox itself)."""
        task, worker.watcher = worker.watcher, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _watch(self, worker: Worker) -> None:
        """Starts the exit watch of the sandbox that now runs on ``worker``."""
        assert worker.container_id is not None and worker.actor is not None
        worker.watcher = asyncio.create_task(self._watch_exit(worker, worker.container_id, worker.actor),
                                             name=f"watch {worker.container_id}")

    async def _watch_exit(self, worker: Worker, cid: str, actor: tuple[str, str]) -> None:
        """Phase 1 (cancelled when the atelet stops the sandbox): waits until the sandbox is gone and
        marks the worker ``exited``. Phase 2 (detached from the worker, never cancelled but by
        ``stop``): learns how it ended, records and reports that, and deletes the dead sandbox."""
        exit_watch = self.driver.exit_watch(cid)
        me = asyncio.current_task()
        assert me is not None
        try:
            try:
                await exit_watch.gone()
            except Exception:  # a broken watch must not take the worker down; leave it running
                log.exception("exit watch of %s on %s failed", cid, worker.name)
                return
            async with worker.lock:  # an operation on the worker finishes first; it may have stopped it
                if worker.container_id != cid or worker.state != "running":
                    return
                worker.watcher = None
                self._detached.add(me)
                worker.container_id, worker.state = None, "exited"
                worker.exit_reason = "exited on its own (finding out how)"
                self._persist(worker)
                self._update_metrics()
            log.warning("sandbox of %s/%s on %s exited on its own", *actor, worker.name)
            reason = await exit_watch.reason(self._log_path(actor))
            if worker.actor == actor and worker.state == "exited" and worker.container_id is None:
                worker.exit_reason = reason
                self._persist(worker)
            log.warning("sandbox of %s/%s on %s: %s", *actor, worker.name, reason)
            if self.on_exit is not None:
                self.on_exit(worker.name, actor, reason)
            await exit_watch.close()
            await self.driver.delete_quietly(cid)
        finally:
            await asyncio.shield(exit_watch.close())
            self._detached.discard(me)

    def _volume_dirs(self, actor: tuple[str, str], spec: pb.WorkloadSpec) -> dict[str, Path]:
        base = self._actor_dir(actor) / "volumes"
        return {v.name: base / v.name for v in spec.volumes if v.durable_dir}

    async def _boot(self, worker: Worker, actor: tuple[str, str], spec: pb.WorkloadSpec,
                    image_path: Path | None, probe_timeout: float, operation: tuple[str, str]) -> tuple[float, float]:
        """Starts (``image_path`` None) or restores the sandbox and waits for its probe.

        Returns (boot seconds, probe seconds). On failure the sandbox is deleted and the worker freed.
        """
        container = spec.containers[0]
        prepared = await self.driver.prepare(self.state_dir / "workers" / worker.name / "bundle", worker.net, spec,
                                             self._volume_dirs(actor, spec), actor[1])
        cid = f"{worker.name}-{uuid.uuid4().hex[:10]}"
        worker.actor, worker.spec, worker.container_id, worker.state = actor, spec, cid, "running"
        worker.operation, worker.started_at, worker.adopted = operation, time.time(), False
        try:
            self._persist(worker)  # before runsc starts it: a crash from here on leaves a record
            start = time.monotonic()
            await self.driver.launch(cid, worker.net, prepared, self._log_path(actor), image_path)
            boot = time.monotonic() - start
            probe_seconds = 0.0
            if container.wakeup_probe.port:
                probe_seconds = await probe.wait_ready(worker.net.worker_ip, container.wakeup_probe.port,
                                                       container.wakeup_probe.path or "/",
                                                       probe_timeout or DEFAULT_PROBE_TIMEOUT)
            self._watch(worker)
            return boot, probe_seconds
        except BaseException:
            try:
                await self.driver.delete(cid)
            finally:
                shutil.rmtree(self._actor_dir(actor), ignore_errors=True)
                self._free(worker)
            raise

    # ---- operations ------------------------------------------------------------------------

    async def run(self, req: pb.RunRequest) -> pb.RunResponse:
        """Cold boot of ``req.actor`` on ``req.worker`` from its template's image."""
        async def op() -> pb.RunResponse:
            actor = actor_key(req.actor)
            validate_spec(req.spec)
            self.images.resolve(req.spec.containers[0].image, "spec.containers[0].image")
            worker = self._worker(req.worker)
            async with worker.lock:
                already = await self._started_by(worker, actor, req.operation_id, "run", req)
                if already is not None:
                    return pb.RunResponse(worker_ip=worker.net.worker_ip, probe_seconds=already)
                self._claim(worker, actor)
                if self.settings.hollow:
                    worker.actor, worker.state = actor, "running"
                    return pb.RunResponse(worker_ip=worker.net.worker_ip)
                shutil.rmtree(self._actor_dir(actor), ignore_errors=True)  # a cold boot starts empty
                boot, probe_s = await self._boot(worker, actor, req.spec, None, req.probe_timeout_seconds,
                                                 (req.operation_id, "run"))
                await failpoint("Atelet.run.after_boot")
                log.info("run %s/%s on %s: boot %.3fs probe %.3fs", *actor, worker.name, boot, probe_s)
                return pb.RunResponse(worker_ip=worker.net.worker_ip, boot_seconds=boot, probe_seconds=probe_s)

        return await self._measured("run", req.operation_id, pb.RunResponse, op, req.worker)

    async def restore(self, req: pb.RestoreRequest) -> pb.RestoreResponse:
        """Restores ``req.actor`` on ``req.worker`` from the snapshot at ``req.snapshot_uri``."""
        async def op() -> pb.RestoreResponse:
            actor = actor_key(req.actor)
            validate_spec(req.spec)
            self.images.resolve(req.spec.containers[0].image, "spec.containers[0].image")
            dest = self.snapshots.resolve(req.snapshot_uri)
            worker = self._worker(req.worker)
            async with worker.lock:
                already = await self._started_by(worker, actor, req.operation_id, "restore", req)
                if already is not None:
                    return pb.RestoreResponse(worker_ip=worker.net.worker_ip, probe_seconds=already)
                self._claim(worker, actor)
                if self.settings.hollow:
                    worker.actor, worker.state = actor, "running"
                    return pb.RestoreResponse(worker_ip=worker.net.worker_ip)
                start = time.monotonic()
                manifest = await self.snapshots.verify(dest, req.manifest, self.driver.sandbox_class,
                                                       self.runsc_version)
                snapshot_files = {f.path for f in manifest.files}
                actor_dir = self._actor_dir(actor)
                shutil.rmtree(actor_dir, ignore_errors=True)
                for name, host_dir in self._volume_dirs(actor, req.spec).items():
                    tar_rel = f"{VOLUMES_DIR}/{name}.tar"
                    if tar_rel in snapshot_files:
                        await asyncio.to_thread(extract_dir, dest / tar_rel, host_dir)
                fetch = time.monotonic() - start
                image_path = dest / CHECKPOINT_DIR if manifest.scope == pb.SNAPSHOT_SCOPE_FULL else None
                boot, probe_s = await self._boot(worker, actor, req.spec, image_path, req.probe_timeout_seconds,
                                                 (req.operation_id, "restore"))
                await failpoint("Atelet.restore.after_boot")
                log.info("restore %s/%s (%s) on %s: fetch %.3fs restore %.3fs probe %.3fs", *actor,
                         pb.SnapshotScope.Name(manifest.scope), worker.name, fetch, boot, probe_s)
                return pb.RestoreResponse(worker_ip=worker.net.worker_ip, fetch_seconds=fetch,
                                          restore_seconds=boot, probe_seconds=probe_s)

        return await self._measured("restore", req.operation_id, pb.RestoreResponse, op, req.worker)

    async def checkpoint(self, req: pb.CheckpointRequest) -> pb.CheckpointResponse:
        """Checkpoints ``req.actor`` on ``req.worker`` to ``req.snapshot_uri`` and frees the worker."""
        async def op() -> pb.CheckpointResponse:
            actor = actor_key(req.actor)
            if req.scope not in (pb.SNAPSHOT_SCOPE_FULL, pb.SNAPSHOT_SCOPE_DATA):
                raise invalid("scope: must be SNAPSHOT_SCOPE_FULL or SNAPSHOT_SCOPE_DATA")
            dest = self.snapshots.resolve(req.snapshot_uri)
            existing = self.snapshots.read_manifest(dest) if dest.exists() else None
            if existing is not None and existing.created_by_operation == req.operation_id:
                return pb.CheckpointResponse(manifest=existing, size_bytes=self.snapshots.size_of(existing))
            if dest.exists():
                raise precondition(f"snapshot_uri: {req.snapshot_uri} already exists (written by operation "
                                   f"{existing.created_by_operation if existing else 'unknown, incomplete'})")
            worker = self._worker(req.worker)
            async with worker.lock:
                if worker.actor != actor or worker.state != "running":
                    raise precondition(f"worker {worker.name} runs {_fmt(worker.actor)} (state {worker.state}), "
                                       f"not a running {_fmt(actor)}")
                manifest = pb.SnapshotManifest(
                    sandbox_class=self.driver.sandbox_class, scope=req.scope, runsc_version=self.runsc_version,
                    actor=pb.ActorRef(atespace=actor[0], name=actor[1]), created_by_operation=req.operation_id)
                if self.settings.hollow:
                    self._free(worker)
                    return pb.CheckpointResponse(manifest=manifest)
                assert worker.container_id is not None and worker.spec is not None
                staging = self.snapshots.staging_dir(dest)
                try:
                    start = time.monotonic()
                    full = req.scope == pb.SNAPSHOT_SCOPE_FULL
                    if full:  # the sandbox exits once its state is saved
                        await self.driver.checkpoint(worker.container_id, staging / CHECKPOINT_DIR)
                    # DATA: stop the sandbox first so the durable dirs are quiet while archived.
                    await self._stop_sandbox(worker, already_exited=full)
                    for name, host_dir in self._volume_dirs(actor, worker.spec).items():
                        await asyncio.to_thread(archive_dir, host_dir, staging / VOLUMES_DIR / f"{name}.tar")
                    checkpoint_s = time.monotonic() - start
                    start = time.monotonic()
                    manifest = await self.snapshots.finalize(staging, dest, manifest)
                    upload_s = time.monotonic() - start
                except BaseException:
                    self.snapshots.discard(staging)
                    if worker.container_id is not None:  # the checkpoint itself failed: still alive?
                        if not await self.driver.alive(worker.container_id):
                            await self._stop_sandbox(worker, already_exited=True)
                    raise
                shutil.rmtree(self._actor_dir(actor), ignore_errors=True)
                self._free(worker)
                size = self.snapshots.size_of(manifest)
                log.info("checkpoint %s/%s (%s) from %s: %.3fs + store %.3fs, %d bytes", *actor,
                         pb.SnapshotScope.Name(req.scope), worker.name, checkpoint_s, upload_s, size)
                return pb.CheckpointResponse(manifest=manifest, size_bytes=size,
                                             checkpoint_seconds=checkpoint_s, upload_seconds=upload_s)

        return await self._measured("checkpoint", req.operation_id, pb.CheckpointResponse, op, req.worker)

    async def terminate(self, req: pb.TerminateRequest) -> pb.TerminateResponse:
        """Stops and deletes ``req.actor``'s sandbox on ``req.worker``; fine when nothing runs."""
        async def op() -> pb.TerminateResponse:
            actor = actor_key(req.actor)
            worker = self._worker(req.worker)
            async with worker.lock:
                if worker.actor != actor:
                    return pb.TerminateResponse(was_running=False)
                was_running = worker.state == "running"
                if not self.settings.hollow:
                    await self._stop_sandbox(worker)
                    shutil.rmtree(self._actor_dir(actor), ignore_errors=True)
                self._free(worker)
                return pb.TerminateResponse(was_running=was_running)

        return await self._measured("terminate", req.operation_id, pb.TerminateResponse, op, req.worker)

    async def delete_snapshot(self, req: pb.DeleteSnapshotRequest) -> pb.DeleteSnapshotResponse:
        """Deletes the snapshot at ``req.snapshot_uri`` (and its empty parents below the root)."""
        async def op() -> pb.DeleteSnapshotResponse:
            dest = self.snapshots.resolve(req.snapshot_uri)
            existed = await asyncio.to_thread(self.snapshots.delete, dest)
            log.info("delete snapshot %s: %s", dest, "deleted" if existed else "nothing there")
            return pb.DeleteSnapshotResponse(existed=existed)

        # Not recorded: deleting is idempotent by itself, and existed=false tells a repeat.
        return await self._measured("delete_snapshot", req.operation_id, pb.DeleteSnapshotResponse, op,
                                    record=False)

    async def copy_snapshot(self, req: pb.CopySnapshotRequest) -> pb.CopySnapshotResponse:
        """Copies the snapshot at ``req.source_uri`` to ``req.destination_uri`` (``SnapshotStore.copy``):
        the upload of a paused actor's local snapshot. Hollow mode copies real files too, but
        answers a missing source with ``req.manifest`` (its Checkpoint wrote nothing)."""
        async def op() -> pb.CopySnapshotResponse:
            start = time.monotonic()
            if self.settings.hollow:
                source = self.snapshots.resolve(req.source_uri, "source_uri")
                self.snapshots.resolve(req.destination_uri, "destination_uri")
                if not source.exists():
                    return pb.CopySnapshotResponse(manifest=req.manifest, size_bytes=0)
            manifest, copied = await self.snapshots.copy(req.source_uri, req.destination_uri, req.manifest)
            seconds = time.monotonic() - start
            await failpoint("Atelet.copy_snapshot.after_copy")
            size = self.snapshots.size_of(manifest)
            log.info("copy snapshot %s -> %s: %s, %d bytes in %.3fs", req.source_uri, req.destination_uri,
                     "copied" if copied else "already there", size, seconds)
            return pb.CopySnapshotResponse(manifest=manifest, size_bytes=size, copy_seconds=seconds)

        return await self._measured("copy_snapshot", req.operation_id, pb.CopySnapshotResponse, op)

    async def fence(self, worker_name: str, actor: tuple[str, str]) -> bool:
        """Terminates ``actor``'s sandbox (running or exited) on ``worker_name`` at the control plane's
        request. Does nothing (False) when the worker holds another actor or nothing, or when an
        operation is in flight on it (the control plane asks again at the next heartbeat)."""
        worker = self.workers.get(worker_name)
        if worker is None or worker.actor != actor:
            log.debug("fence of %s/%s on %s: not there (%s), nothing to do", *actor, worker_name,
                     _fmt(worker.actor) if worker else "no such worker")
            return False
        if worker.inflight or worker.lock.locked():
            log.info("fence of %s/%s on %s deferred: an operation is in flight", *actor, worker_name)
            return False
        async with worker.lock:  # free and without waiters: taken at once, no operation can slip in
            if worker.actor != actor:
                return False
            if not self.settings.hollow:
                await self._stop_sandbox(worker)
                shutil.rmtree(self._actor_dir(actor), ignore_errors=True)
            self._free(worker)
            self._update_metrics()
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
                    exit_reason=w.exit_reason,
                    actor=pb.ActorRef(atespace=w.actor[0], name=w.actor[1]) if w.actor else None,
                )
                for w in self.workers.values()
            ],
        )
