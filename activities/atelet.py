"""Activities that call atelets over gRPC: run/restore, checkpoint, copy (upload), terminate,
delete a snapshot, freeze and thaw (`activities.atelet_freeze`).

Every call carries the operation ID; the atelet answers a repeat with the first call's result,
so Temporal may retry any of these after a crash without a double restore or a second
checkpoint. The calls go through `activities.atelet_channels` (mutual-TLS channels kept open per
node, heartbeats while a call runs, an unreachable atelet told from one that refused); the wire
messages are built by `activities.atelet_wire`. A resume's or a suspend's RUNNING or SUSPENDED
commit is made here right after the atelet answered (`_finalize_here`), so the api-server can
answer at that commit's NOTIFY.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import atelet_exec as exec_calls
from activities import atelet_freeze as freeze_calls
from activities.atelet_channels import AteletChannels
from activities.atelet_tls import AteletClientTls
from activities.atelet_wire import (
    SCOPES,
    actor_ref,
    call_id,
    manifest_dict,
    manifest_message,
    own_generation,
    restore_notice,
    workload_spec,
)
from activities.errors import AteletCallFailed, activity_defn
from atelet.proto import atelet_pb2 as pb
from domain.activity_names import Activity
from domain.failpoints import failpoint
from domain.operations.atelet_calls import (
    AteletCheckpointInput,
    AteletCheckpointResult,
    AteletCopyInput,
    AteletRunInput,
    AteletRunResult,
    AteletTerminateInput,
)
from domain.operations.exec import AteletExecInput, ExecResult
from domain.operations.freeze import AteletFreezeInput, AteletFreezeResult
from domain.operations.resume import PlaceAndRestoreInput, PlaceAndRestoreResult
from domain.operations.snapshot_gc import DeleteSnapshotInput
from domain.reasons import Reason
from domain.refs import ActorRef, WorkerRef
from domain.states import SnapshotStorage
from store.interfaces import AteletActivitiesStore

CHECKPOINT_REACH_SECONDS = 60.0
"""How long a checkpoint waits for an atelet that does not answer (restarting) before it fails:
the sandbox may have finished its save alone meanwhile, and only this call's retry stores it
(atelet/checkpoint_ops.py); giving up at once left the actor RUNNING on a sandbox that had
exited (the chaos run of 2026-12-02). An atelet that answers with an error is not waited for."""

REACH_RETRY_SECONDS = 1.0
"""How often a checkpoint tries an atelet that could not be reached again."""


class AteletActivities:
    """gRPC activities over mutual TLS (`tls`: the control plane's client identity).

    Args:
        store: the store (None: only for registering the activities' names).
        call_timeout_seconds: the deadline of a Run, Restore, Checkpoint or CopySnapshot call.
        tls: the client certificate, key and CA of the channels to atelets.
    """

    def __init__(
        self, store: AteletActivitiesStore | None = None, call_timeout_seconds: float = 300.0, *, tls: AteletClientTls
    ) -> None:
        self.store = store
        self.channels = AteletChannels(tls)
        self.call_timeout_seconds = call_timeout_seconds

    async def _still_placed(self, placement: str, worker: WorkerRef, operation_id: str) -> None:
        """Refuse to touch a sandbox for an operation that lost its place meanwhile.

        A local activity keeps running after its workflow was terminated (a revert took over a
        stuck resume): without this check it would start a sandbox on a worker the control
        plane has already given to someone else.

        Raises:
            ApplicationError: type Superseded (non-retryable).
        """
        if self.store is None or await self.store.placement.held(placement, worker.worker_id, operation_id):
            return
        raise ApplicationError(
            f"operation {operation_id} no longer holds worker {worker.pool}/{worker.name} for {placement} "
            "(the actor was reverted or deleted meanwhile); not touching its sandbox",
            type=Reason.SUPERSEDED,
            non_retryable=True,
        )

    async def close(self) -> None:
        """Close every channel."""
        await self.channels.close()

    @activity_defn(Activity.ATELET_START)
    async def start(self, request: AteletRunInput) -> AteletRunResult:
        """Boot (no snapshot) or restore (snapshot) the holder's workload on the worker; with
        `mark_running`, then mark the holder RUNNING (see `_mark_running`), and answer a repeat
        after that commit with success at once.

        Raises:
            ApplicationError: non-retryable for INVALID_ARGUMENT/NOT_FOUND/FAILED_PRECONDITION,
                retryable otherwise.
        """
        await failpoint(f"{activity.info().workflow_type}.atelet_call")
        if request.mark_running and activity.info().attempt > 1 and await self._marked_already(request):
            return AteletRunResult(worker_ip=request.worker.ip)
        await self._still_placed(request.placement or request.holder.workflow_id, request.worker, request.operation_id)
        return await self._start(request)

    @activity_defn(Activity.PLACE_AND_RESTORE)
    async def place_and_restore(self, request: PlaceAndRestoreInput) -> PlaceAndRestoreResult:
        """ResumeActor's placement, restore and finalize in one activity: `begin_resume`'s
        transaction (SUSPENDED|PAUSED -> RESUMING on a chosen worker), the atelet's Restore (or
        Run), then RESUMING -> RUNNING (`_mark_running`). One activity instead of a local
        activity and a regular one took 5-7 ms off the critical path (bench/README.md,
        "activation"). Each part is idempotent for the operation, so a retry after any crash
        finds the same worker, the atelet's recorded answer and the same commit.

        Raises:
            ApplicationError: the store's refusals of the placement (NotFound,
                FailedPrecondition, NoCapacity, PinnedNodeFull, ActorUnreachable; nothing was
                placed), Superseded (the place was taken over before the atelet was called), or
                the atelet's failure of the restore (`start`'s errors; the actor is
                then RESUMING on `ResumeProgress.worker`).
        """
        if self.store is None:
            raise RuntimeError("place_and_restore needs the store")
        await failpoint("ResumeActor.before_placement")
        started = time.monotonic()
        plan = await self.store.resumes.begin(request.actor, request.operation_id, request.waited_for_room)
        placement = time.monotonic() - started
        await failpoint("ResumeActor.after_bind")
        if plan.already_running:
            earlier = activity.info().attempt > 1 and await self.store.resumes.finished(
                request.actor, request.operation_id
            )
            return PlaceAndRestoreResult(plan=plan, placement_seconds=placement, resumed_earlier=earlier)
        assert plan.worker is not None and plan.spec is not None
        if plan.thaw:
            return PlaceAndRestoreResult(
                plan=plan, restored=await self._thaw(request, plan.worker), placement_seconds=placement
            )
        await failpoint("ResumeActor.atelet_call")
        # A revert may have taken the place over since `begin` (this activity goes on after its
        # workflow ended): a restore now would start a second sandbox of the actor on this node.
        await self._still_placed(request.actor.workflow_id, plan.worker, request.operation_id)
        restored = await self._start(
            AteletRunInput(
                operation_id=request.operation_id,
                worker=plan.worker,
                holder=request.actor,
                spec=plan.spec,
                snapshot=plan.snapshot,
                probe_timeout_seconds=request.probe_timeout_seconds,
                mark_running=True,
                template=plan.template,
            )
        )
        return PlaceAndRestoreResult(plan=plan, restored=restored, placement_seconds=placement)

    async def _thaw(self, request: PlaceAndRestoreInput, worker: WorkerRef) -> AteletRunResult:
        """A FROZEN actor's resume: thaw its sandbox in place, then RESUMING -> RUNNING (no
        placement, no restore: the sandbox kept its worker and its memory)."""
        await self._still_placed(request.actor.workflow_id, worker, request.operation_id)
        thawed = await freeze_calls.thaw(
            self.channels, AteletFreezeInput(operation_id=request.operation_id, worker=worker, holder=request.actor)
        )
        result = AteletRunResult(worker_ip=worker.ip, timings={"thaw": thawed.seconds})
        await self._mark_running(request.actor, request.operation_id, result)
        return result

    @activity_defn(Activity.ATELET_FREEZE)
    async def freeze(self, request: AteletFreezeInput) -> AteletFreezeResult:
        """Stop the holder's sandbox in place (FreezeActor; idempotent).

        Raises:
            ApplicationError: non-retryable for INVALID_ARGUMENT/NOT_FOUND/FAILED_PRECONDITION,
                retryable otherwise.
        """
        return await freeze_calls.freeze(self.channels, request)

    @activity_defn(Activity.ATELET_EXEC)
    async def exec_command(self, request: AteletExecInput) -> ExecResult:
        """Run a command in the holder's sandbox until it ends (ExecInActor; not idempotent: the
        workflow runs it once).

        Raises:
            ApplicationError: the atelet refused (FAILED_PRECONDITION: not running there, frozen)
                or could not be reached.
        """
        return await exec_calls.exec_command(self.channels, request)

    async def _start(self, request: AteletRunInput) -> AteletRunResult:
        """The atelet's Run (no snapshot) or Restore, then `_mark_running` when asked (`start`)."""
        result = await self._run_or_restore(request)
        if request.mark_running:
            await self._mark_running(request.holder, request.operation_id, result)
        return result

    async def _run_or_restore(self, request: AteletRunInput) -> AteletRunResult:
        """The atelet's Run (no snapshot) or Restore of the holder's workload on the worker."""
        address, node = request.worker.atelet_address, request.worker.node
        spec = workload_spec(request.spec, request.template, own_generation(request.snapshot, request.holder))
        spec.golden = request.golden
        if request.snapshot is None:
            boot = pb.RunRequest(
                operation_id=call_id(request.operation_id, "run"),
                worker=request.worker.name,
                actor=actor_ref(request.holder),
                spec=spec,
                probe_timeout_seconds=request.probe_timeout_seconds,
            )
            run = await self.channels.call(
                address, node, "Run", lambda stub: stub.Run(boot, timeout=self.call_timeout_seconds)
            )
            return AteletRunResult(
                worker_ip=run.worker_ip, timings={"boot": run.boot_seconds, "probe": run.probe_seconds}
            )
        restore = pb.RestoreRequest(
            operation_id=call_id(request.operation_id, "restore"),
            worker=request.worker.name,
            actor=actor_ref(request.holder),
            spec=spec,
            snapshot_uri=request.snapshot.uri,
            manifest=manifest_message(request.snapshot.manifest),
            probe_timeout_seconds=request.probe_timeout_seconds,
            notice=restore_notice(request.spec, request.snapshot, request.holder),
        )
        restored = await self.channels.call(
            address, node, "Restore", lambda stub: stub.Restore(restore, timeout=self.call_timeout_seconds)
        )
        return AteletRunResult(
            worker_ip=restored.worker_ip,
            timings={
                "fetch": restored.fetch_seconds,
                "restore": restored.restore_seconds,
                "probe": restored.probe_seconds,
            },
            snapshot_cache_hit=restored.snapshot_cache_hit,
        )

    async def _marked_already(self, request: AteletRunInput) -> bool:
        """Whether an earlier attempt of this call marked the holder RUNNING (its answer was
        lost): the retry must then answer success without touching the sandbox."""
        return await self._done_earlier(
            request.holder, "RUNNING", lambda store: store.resumes.finished(request.holder, request.operation_id)
        )

    async def _mark_running(self, holder: ActorRef, operation_id: str, result: AteletRunResult) -> None:
        """ResumeActor's finalize, done here right after the restore answered: RESUMING ->
        RUNNING in one commit whose NOTIFY lets the api-server answer the resume at once
        (bench/README.md, "activation"). Any failure leaves `result.marked_running_at` None and
        the workflow runs its own `finish_resume` step (`_finalize_here`)."""
        result.marked_running_at = await self._finalize_here(
            holder, "marking RUNNING", lambda store: store.resumes.finish(holder, operation_id), result.timings
        )

    async def _done_earlier(self, holder: ActorRef, state: str, check: Callable[[AteletActivitiesStore], Awaitable[bool]]) -> bool:
        """Whether an earlier attempt of this call committed its operation's finalize, as `check`
        asks the store (callers ask from the second attempt on; a first attempt has no earlier
        one). No store, or a database that does not answer, counts as no: the call then goes on
        as a first attempt would."""
        if self.store is None:
            return False
        try:
            return await check(self.store)
        except Exception as error:  # Postgres down or restarting: decide as a first attempt would
            activity.logger.warning("could not check whether %s is %s already: %s", holder.key, state, error)
            return False

    async def _finalize_here(
        self, holder: ActorRef, what: str, commit: Callable[[AteletActivitiesStore], Awaitable[None]], timings: dict[str, float]
    ) -> float | None:
        """An operation's finalize `commit`, run in the activity right after the atelet answered
        (after the `<workflow>.before_finalize` failpoint); its seconds go to `timings["finalize"]`.

        Returns:
            The commit's Unix time (seconds), or None without a store or when the commit failed
            (a store refusal, Postgres down): the workflow's own finalize step then runs, which
            retries through a database restart and raises the store's error in the user's terms.
        """
        await failpoint(f"{activity.info().workflow_type}.before_finalize")
        if self.store is None:
            return None
        started = time.monotonic()
        try:
            await commit(self.store)
        except Exception as error:  # a store refusal, Postgres down: the workflow's own step decides
            activity.logger.warning("%s %s is left to the workflow: %s", what, holder.key, error)
            return None
        timings["finalize"] = time.monotonic() - started
        return time.time()

    @activity_defn(Activity.ATELET_CHECKPOINT)
    async def checkpoint(self, request: AteletCheckpointInput) -> AteletCheckpointResult:
        """Checkpoint the holder into request.snapshot.uri with its scope; the worker is freed.

        Raises:
            ApplicationError: as for `start`; UNAVAILABLE (e.g. a connection still open) is retried.
        """
        await failpoint(f"{activity.info().workflow_type}.atelet_checkpoint")
        if request.complete_suspend and activity.info().attempt > 1 and await self._completed_already(request):
            return AteletCheckpointResult(manifest={}, size_bytes=0, completed_earlier=True)
        await self._still_placed(request.placement or request.holder.workflow_id, request.worker, request.operation_id)
        address = request.worker.atelet_address
        call = pb.CheckpointRequest(
            operation_id=call_id(request.operation_id, "checkpoint"),
            worker=request.worker.name,
            actor=actor_ref(request.holder),
            scope=SCOPES[request.snapshot.scope],
            snapshot_uri=request.snapshot.uri,
        )
        deadline = time.monotonic() + CHECKPOINT_REACH_SECONDS
        while True:
            try:
                done = await self.channels.call(
                    address,
                    request.worker.node,
                    "Checkpoint",
                    lambda stub: stub.Checkpoint(call, timeout=self.call_timeout_seconds),
                )
                break
            except AteletCallFailed as failed:
                if not failed.unreachable or time.monotonic() > deadline:
                    raise
            if activity.in_activity():
                activity.heartbeat()
            await asyncio.sleep(REACH_RETRY_SECONDS)
        result = AteletCheckpointResult(
            manifest=manifest_dict(done.manifest),
            size_bytes=done.size_bytes,
            timings={"checkpoint": done.checkpoint_seconds, "upload": done.upload_seconds,
                     "egress_wait": done.egress_wait_seconds},
            egress_cut=done.egress_cut,
        )
        if request.complete_suspend:
            await self._complete_suspend(request, result)
        return result

    async def _completed_already(self, request: AteletCheckpointInput) -> bool:
        """Whether an earlier attempt of this call completed the suspend (its answer was lost):
        the worker is free by then, so the retry must answer without the atelet."""
        return await self._done_earlier(
            request.holder,
            "SUSPENDED",
            lambda store: store.suspends.completed(request.holder, request.snapshot.snapshot_id),
        )

    async def _complete_suspend(self, request: AteletCheckpointInput, result: AteletCheckpointResult) -> None:
        """SuspendActor's finalize, right after the checkpoint answered: snapshot COMPLETED with
        the atelet's manifest, actor SUSPENDED, worker freed, in one commit whose NOTIFY lets the
        api-server answer at once. Any failure leaves `result.completed_at` None and the workflow
        runs its own `complete_suspend` step (`_finalize_here`)."""
        result.completed_at = await self._finalize_here(
            request.holder,
            "completing the suspend of",
            lambda store: store.suspends.complete(
                request.holder, request.operation_id, request.snapshot.snapshot_id, result.manifest, result.size_bytes
            ),
            result.timings,
        )

    @activity_defn(Activity.ATELET_COPY_SNAPSHOT)
    async def copy_snapshot(self, request: AteletCopyInput) -> AteletCheckpointResult:
        """Upload a paused actor's LOCAL snapshot: the atelet of its node copies it (verified
        against its manifest) to `request.destination.uri`. Touches no sandbox; idempotent.

        Raises:
            ApplicationError: AteletNotFound when the local snapshot is gone from the node,
                AteletDataLoss when it does not match its manifest; other codes retried.
        """
        await failpoint(f"{activity.info().workflow_type}.atelet_copy")
        address = request.atelet_address
        if request.source.node is None:
            raise ApplicationError(
                f"local snapshot {request.source.uri} names no node; cannot reach the atelet holding it",
                type=Reason.ATELET_NOT_FOUND,
                non_retryable=True,
            )
        copy = pb.CopySnapshotRequest(
            operation_id=call_id(request.operation_id, "copy"),
            source_uri=request.source.uri,
            destination_uri=request.destination.uri,
            manifest=manifest_message(request.source.manifest),
        )
        done = await self.channels.call(
            address,
            request.source.node,
            "CopySnapshot",
            lambda stub: stub.CopySnapshot(copy, timeout=self.call_timeout_seconds),
        )
        return AteletCheckpointResult(
            manifest=manifest_dict(done.manifest),
            size_bytes=done.size_bytes,
            timings={"upload": done.copy_seconds},
        )

    @activity_defn(Activity.ATELET_TERMINATE)
    async def terminate(self, request: AteletTerminateInput) -> bool:
        """Stop and delete the holder's sandbox on the worker (idempotent; with `only_own`, only
        the one this operation's Run or Restore started). Returns whether one ran."""
        own = [call_id(request.operation_id, "run"), call_id(request.operation_id, "restore")]
        stop = pb.TerminateRequest(
            operation_id=call_id(request.operation_id, "terminate"),
            worker=request.worker.name,
            actor=actor_ref(request.holder),
            started_by=own if request.only_own else [],
        )
        done = await self.channels.call(
            request.worker.atelet_address, request.worker.node, "Terminate", lambda stub: stub.Terminate(stop, timeout=60)
        )
        return bool(done.was_running)

    @activity_defn(Activity.DELETE_SNAPSHOT)
    async def delete_snapshot(self, request: DeleteSnapshotInput) -> bool:
        """Delete a snapshot's data through a live atelet, then its row. Returns whether data existed.

        A LOCAL snapshot lies on one node: only that node's atelet can delete it.

        Raises:
            ApplicationError: no (suitable) atelet is alive (retried), or the atelet refused the URI.
        """
        assert self.store is not None
        snapshot = request.snapshot
        if snapshot.storage == SnapshotStorage.LOCAL and snapshot.node:
            address = await self.store.nodes.live_atelet_of(snapshot.node)
            if address is None:
                raise ApplicationError(
                    f"node {snapshot.node} holding local snapshot {snapshot.uri} is not alive; retrying later",
                    type=Reason.NO_ATELET,
                )
            node = snapshot.node
        else:
            live = await self.store.nodes.any_live_atelet()
            if live is None:
                raise ApplicationError("no atelet is alive to delete snapshots; retrying later", type=Reason.NO_ATELET)
            node, address = live
        delete = pb.DeleteSnapshotRequest(
            operation_id=call_id(f"gc-{snapshot.snapshot_id}", "delete"), snapshot_uri=snapshot.uri
        )
        done = await self.channels.call(address, node, "DeleteSnapshot", lambda stub: stub.DeleteSnapshot(delete, timeout=60))
        await self.store.snapshots.forget(snapshot.snapshot_id)
        return bool(done.existed)
