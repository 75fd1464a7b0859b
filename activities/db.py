"""Activities that read and write Postgres: every actor state transition of every workflow.

Each is idempotent for its operation ID (see `store`): a retry after a crash at any
point finds the earlier write and returns the same plan. Failures are translated once, by
`activity_defn` (activities.errors).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from temporalio import activity

from activities.errors import activity_defn
from domain.activity_names import Activity
from domain.failpoints import failpoint
from domain.operations.common import FinishInput
from domain.operations.drain import BeginDrainInput, CrashInput, DrainPlan, Leftover
from domain.operations.exec import BeginExecInput, FinishExecInput
from domain.operations.freeze import BeginFreezeInput, FinishFreezeInput, FreezePlan
from domain.operations.golden import GoldenPlan, GoldenSnapshotInput
from domain.operations.pause import PausePlan
from domain.operations.pressure import LeaveRoomQueueInput, PressureInput, PressureVictims, ReleaseRoomInput
from domain.operations.resume import BeginResumeInput, ResumePlan, ResumeProgress
from domain.operations.revert import BeginRevertInput, FenceInput, FinishRevertInput, RevertPlan
from domain.operations.router_drain import (
    DRAIN_ACK_MARGIN_SECONDS,
    MAX_DRAIN_WAIT_SECONDS,
    RouterDrainInput,
    RouterDrainResult,
)
from domain.operations.snapshot_gc import GarbageSnapshot, SnapshotGcInput
from domain.operations.suspend import BeginSuspendInput, CompleteSnapshotInput, SuspendCompletedInput, SuspendPlan
from domain.operations.upload import CompleteUploadInput, UploadInput, UploadPlan
from domain.refs import WorkerRef
from store.interfaces import DbActivitiesStore

log = logging.getLogger(__name__)

DRAIN_POLL_SECONDS = (0.002, 0.004, 0.008, 0.016, 0.032, 0.05)
"""When `drain_routers` looks for the replicas' acknowledgements again: soon at first (a replica
with nothing in flight answers within a few ms; bench/README.md, "activation"), then every 50 ms."""


class DbActivities:
    """Postgres activities bound to the store (`store.interfaces.DbActivitiesStore`)."""

    def __init__(self, store: DbActivitiesStore) -> None:
        self.store = store

    # ---- ExecInActor ------------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_EXEC)
    async def begin_exec(self, request: BeginExecInput) -> WorkerRef:
        """The RUNNING actor's worker, the exec recorded in its history (who, what)."""
        return await self.store.execs.begin(request.actor, request.operation_id, request.reason)

    @activity_defn(Activity.FINISH_EXEC)
    async def finish_exec(self, request: FinishExecInput) -> None:
        """How the exec ended, in the actor's history."""
        await self.store.execs.finish(request.operation_id, request.outcome, request.error)

    # ---- FreezeActor ------------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_FREEZE)
    async def begin_freeze(self, request: BeginFreezeInput) -> FreezePlan:
        """RUNNING -> FROZEN under the operation (the routers stop sending at its NOTIFY)."""
        return await self.store.freezes.begin(request.actor, request.operation_id, request.reason)

    @activity_defn(Activity.FINISH_FREEZE)
    async def finish_freeze(self, request: FinishFreezeInput) -> None:
        """The sandbox is stopped: the actor rests FROZEN, the operation is recorded finished."""
        await self.store.freezes.finish(request.actor, request.operation_id, request.error)

    @activity_defn(Activity.ROLLBACK_FREEZE)
    async def rollback_freeze(self, request: FinishFreezeInput) -> None:
        """FROZEN -> RUNNING: the freeze gave way to traffic (`error` None) or failed."""
        await self.store.freezes.rollback(request.actor, request.operation_id, request.error)

    @activity_defn(Activity.PRESSURE_VICTIMS)
    async def pressure_victims(self, request: PressureInput) -> PressureVictims:
        """The best opted-in actor to move for `request.actor` (store.pressure) that it has not
        tried, its worker kept for that resume or, in the room queue (`request.operation_id`),
        for the oldest waiting resume it would take; none when there is none."""
        return await self.store.pressure.claim(request.actor, request.tried, request.operation_id)

    @activity_defn(Activity.RELEASE_ROOM)
    async def release_room(self, request: ReleaseRoomInput) -> None:
        """The moves of `request.victims` gave way or failed: their workers are kept for nobody."""
        await self.store.room_queue.release(request.victims)

    @activity_defn(Activity.LEAVE_ROOM_QUEUE)
    async def leave_room_queue(self, request: LeaveRoomQueueInput) -> None:
        """`request.actor`'s resume stopped waiting for room: out of the queue, its kept workers free."""
        await self.store.room_queue.leave(request.actor)

    # ---- ResumeActor ------------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_RESUME)
    async def begin_resume(self, request: BeginResumeInput) -> ResumePlan:
        """Place and bind: SUSPENDED|PAUSED -> RESUMING on a chosen worker (one transaction)."""
        await failpoint("ResumeActor.before_placement")
        plan = await self.store.resumes.begin(request.actor, request.operation_id)
        await failpoint("ResumeActor.after_bind")
        return plan

    @activity_defn(Activity.FINISH_RESUME)
    async def finish_resume(self, request: FinishInput) -> None:
        """RESUMING -> RUNNING."""
        await failpoint("ResumeActor.before_finalize")
        await self.store.resumes.finish(request.actor, request.operation_id)

    @activity_defn(Activity.RESUME_FINISHED)
    async def resume_finished(self, request: FinishInput) -> bool:
        """Whether this operation marked the actor RUNNING already (a restore that marked it and
        then lost its answer): the workflow must not roll such an actor back."""
        return await self.store.resumes.finished(request.actor, request.operation_id)

    @activity_defn(Activity.RESUME_PROGRESS)
    async def resume_progress(self, request: FinishInput) -> ResumeProgress:
        """How far this operation's place_and_restore got (`Resumes.progress`), read after it
        failed: RUNNING (its answer was lost), RESUMING on a worker (to roll back), or nothing."""
        return await self.store.resumes.progress(request.actor, request.operation_id)

    @activity_defn(Activity.ROLLBACK_THAW)
    async def rollback_thaw(self, request: FinishInput) -> None:
        """RESUMING -> FROZEN after a thaw that failed for good, recording the error (`request.error`)."""
        await self.store.resumes.rollback_thaw(request.actor, request.operation_id, request.error or "thaw failed")

    @activity_defn(Activity.ROLLBACK_RESUME)
    async def rollback_resume(self, request: FinishInput) -> None:
        """RESUMING -> SUSPENDED (or PAUSED) and free the place, recording the error."""
        await self.store.resumes.rollback(request.actor, request.operation_id, request.error or "resume failed")

    # ---- SuspendActor and PauseActor --------------------------------------------------------

    @activity_defn(Activity.BEGIN_SUSPEND)
    async def begin_suspend(self, request: BeginSuspendInput) -> SuspendPlan:
        """RUNNING|PAUSED -> SUSPENDING with a PENDING snapshot reserved."""
        await failpoint("SuspendActor.before_mark")
        plan = await self.store.suspends.begin(request.actor, request.operation_id, request.mode, request.reason)
        await failpoint("SuspendActor.after_mark")
        return plan

    @activity_defn(Activity.COMPLETE_SUSPEND)
    async def complete_suspend(self, request: CompleteSnapshotInput) -> None:
        """Snapshot COMPLETED, actor SUSPENDED, worker freed."""
        await failpoint("SuspendActor.before_finalize")
        await self.store.suspends.complete(
            request.actor, request.operation_id, request.snapshot_id, request.manifest, request.size_bytes
        )

    @activity_defn(Activity.SUSPEND_COMPLETED)
    async def suspend_completed(self, request: SuspendCompletedInput) -> bool:
        """Whether the suspend already completed with this snapshot (a checkpoint activity that
        completed it and then lost its answer): the workflow must not roll it back."""
        return await self.store.suspends.completed(request.actor, request.snapshot_id)

    @activity_defn(Activity.ROLLBACK_SUSPEND)
    async def rollback_suspend(self, request: CompleteSnapshotInput) -> None:
        """SUSPENDING|PAUSING -> RUNNING after a failed checkpoint, SUSPENDING -> PAUSED after a failed
        upload (the error is in manifest['error'])."""
        await self.store.suspends.rollback(
            request.actor, request.operation_id, request.snapshot_id, str(request.manifest.get("error", "")),
            abandoned=request.abandoned,
        )  # fmt: skip

    @activity_defn(Activity.BEGIN_PAUSE)
    async def begin_pause(self, request: BeginSuspendInput) -> PausePlan:
        """RUNNING|FROZEN -> PAUSING with a PENDING local snapshot reserved on the worker's node."""
        await failpoint("PauseActor.before_mark")
        plan = await self.store.pauses.begin(request.actor, request.operation_id, request.reason)
        await failpoint("PauseActor.after_mark")
        return plan

    @activity_defn(Activity.COMPLETE_PAUSE)
    async def complete_pause(self, request: CompleteSnapshotInput) -> None:
        """Local snapshot COMPLETED, actor PAUSED and pinned to its node, worker freed."""
        await failpoint("PauseActor.before_finalize")
        await self.store.pauses.complete(
            request.actor, request.operation_id, request.snapshot_id, request.manifest, request.size_bytes
        )

    @activity_defn(Activity.DRAIN_ROUTERS)
    async def drain_routers(self, request: RouterDrainInput) -> RouterDrainResult:
        """Before a checkpoint: record the drain of the actor's traffic (NOTIFY to the router
        replicas) and wait until every live replica acknowledged it, or the longest drain timeout
        of those still missing plus `DRAIN_ACK_MARGIN_SECONDS` passed (at most
        `MAX_DRAIN_WAIT_SECONDS`); the checkpoint then goes ahead, the missing ones named. For an
        `if_idle` drain the wait ends as soon as one replica refused it busy (a request of the
        actor in flight there): the result's `busy` names it and the caller abandons the action."""
        await failpoint(f"{activity.info().workflow_type}.router_drain")
        drain_id = await self.store.router_drains.request(request.actor, request.operation_id, request.if_idle)
        started = time.monotonic()
        polls = 0
        while True:
            progress = await self.store.router_drains.waiting(drain_id)
            waited = time.monotonic() - started
            bound = min(progress.longest_timeout_seconds + DRAIN_ACK_MARGIN_SECONDS, MAX_DRAIN_WAIT_SECONDS)
            if request.max_wait_seconds is not None:
                bound = min(bound, request.max_wait_seconds)
            if not progress.missing or waited >= bound or progress.busy:
                break
            await asyncio.sleep(DRAIN_POLL_SECONDS[min(polls, len(DRAIN_POLL_SECONDS) - 1)])
            polls += 1
        if progress.busy:
            log.info(
                "idle drain %d of actor %s refused by busy router replica(s) %s in %.3fs: the request wins",
                drain_id, request.actor.key, ", ".join(progress.busy), waited,
            )  # fmt: skip
        elif progress.missing:
            log.warning(
                "drain %d of actor %s: router replicas %s did not acknowledge within %.1fs; checkpointing anyway",
                drain_id, request.actor.key, ", ".join(progress.missing), waited,
            )  # fmt: skip
        else:
            log.info(
                "drain %d of actor %s acknowledged by %d router replica(s) in %.3fs",
                drain_id, request.actor.key, len(progress.acknowledged), waited,
            )  # fmt: skip
        return RouterDrainResult(
            drain_id=drain_id,
            acknowledged=progress.acknowledged,
            missing=progress.missing,
            waited_seconds=waited,
            busy=progress.busy,
        )

    # ---- UploadSnapshot ---------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_UPLOAD)
    async def begin_upload(self, request: UploadInput) -> UploadPlan:
        """Reserve the storage-location snapshot an async suspend's local one is uploaded to."""
        await failpoint("UploadSnapshot.before_reserve")
        return await self.store.uploads.begin(request.actor, request.operation_id, request.local_snapshot_id)

    @activity_defn(Activity.COMPLETE_UPLOAD)
    async def complete_upload(self, request: CompleteUploadInput) -> bool:
        """The upload landed: it becomes the actor's latest snapshot when the actor still waits for it."""
        await failpoint("UploadSnapshot.before_finalize")
        return await self.store.uploads.complete(
            request.actor, request.local_snapshot_id, request.snapshot_id, request.manifest, request.size_bytes
        )

    @activity_defn(Activity.ABANDON_UPLOAD)
    async def abandon_upload(self, request: UploadInput) -> None:
        """Forget the snapshot an upload reserved and will not complete."""
        await self.store.uploads.abandon(request.actor, request.operation_id)

    # ---- GoldenSnapshot ---------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_GOLDEN)
    async def begin_golden(self, request: GoldenSnapshotInput) -> GoldenPlan:
        """Bind a worker for the template's golden boot and reserve the snapshot."""
        await failpoint("GoldenSnapshot.before_placement")
        plan = await self.store.golden_snapshots.begin(
            request.atespace, request.template, activity.info().workflow_run_id or ""
        )
        await failpoint("GoldenSnapshot.after_bind")
        return plan

    @activity_defn(Activity.COMPLETE_GOLDEN)
    async def complete_golden(self, request: CompleteSnapshotInput) -> None:
        """Golden snapshot COMPLETED, template Ready."""
        await failpoint("GoldenSnapshot.before_finalize")
        await self.store.golden_snapshots.complete(
            request.actor.atespace, request.actor.name, request.snapshot_id, request.manifest, request.size_bytes
        )

    @activity_defn(Activity.FAIL_GOLDEN)
    async def fail_golden(self, request: FinishInput) -> None:
        """Template Failed with the reason; its place released."""
        await self.store.golden_snapshots.fail(
            request.actor.atespace, request.actor.name, request.operation_id, request.error or "golden snapshot failed"
        )

    # ---- RevertActor ------------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_REVERT)
    async def begin_revert(self, request: BeginRevertInput) -> RevertPlan:
        """Mark REVERTING (with the generation to go back to, if any); returns the worker to clean
        and whether its node is alive."""
        await failpoint("RevertActor.before_mark")
        plan = await self.store.reverts.begin(request.actor, request.operation_id, request.to_generation)
        await failpoint("RevertActor.after_mark")
        return plan

    @activity_defn(Activity.FENCE_WORKER)
    async def fence_worker(self, request: FenceInput) -> None:
        """Keep a worker out of placement until its atelet reports it idle."""
        await self.store.nodes.fence_worker(request.worker_id, request.reason)

    @activity_defn(Activity.FINISH_REVERT)
    async def finish_revert(self, request: FinishRevertInput) -> None:
        """REVERTING -> SUSPENDED with the last COMPLETED snapshot."""
        await failpoint("RevertActor.before_finalize")
        await self.store.reverts.finish(request.actor, request.operation_id, request.note, request.recovery_of)

    # ---- EvictionDeadline -------------------------------------------------------------------

    @activity_defn(Activity.BEGIN_DRAIN)
    async def begin_drain(self, request: BeginDrainInput) -> DrainPlan:
        """Mark the node draining and list its actors."""
        deadline = datetime.now(UTC) + timedelta(seconds=request.deadline_seconds)
        return await self.store.drains.begin(request.node, deadline)

    @activity_defn(Activity.DRAIN_LEFTOVERS)
    async def drain_leftovers(self, node: str) -> list[Leftover]:
        """Actors still bound to the node's workers, or pinned to it."""
        return [Leftover(actor=ref, worker=worker) for ref, worker in await self.store.drains.leftovers(node)]

    @activity_defn(Activity.CRASH_AFTER_DEADLINE)
    async def crash_after_deadline(self, request: CrashInput) -> None:
        """Mark an actor left on a drained node CRASHED (its last COMPLETED snapshot is kept)."""
        await self.store.drains.crash_after_deadline(request.actor, request.worker_id, request.reason, request.node)

    # ---- SnapshotGarbageCollection ----------------------------------------------------------

    @activity_defn(Activity.GARBAGE_SNAPSHOTS)
    async def garbage_snapshots(self, request: SnapshotGcInput) -> list[GarbageSnapshot]:
        """A batch of snapshots nothing needs."""
        return await self.store.snapshots.garbage(request.batch, request.min_age_seconds)
