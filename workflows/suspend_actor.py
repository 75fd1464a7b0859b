"""SuspendActor: RUNNING|PAUSED -> SUSPENDING -> SUSPENDED.

Mode sync: the snapshot is in the storage location when this returns. Mode async (from
RUNNING): the checkpoint is written to the worker's node (a LOCAL snapshot), the actor becomes
SUSPENDED pinned to that node, and an UploadSnapshot workflow (`workflows.upload_snapshot`) is
started to upload it in the background; a resume meanwhile restores the local copy there.

Steps (idempotent local activities, operation ID = this run's ID):
1. mark: `begin_suspend` marks SUSPENDING and reserves the next snapshot generation (PENDING).
2. drain: `drain_routers` (from RUNNING) has every live router replica stop sending the actor
   new requests (they wait and are served after the next resume), finish or cut those in
   flight and close its worker connections, so no response is cut short by the checkpoint and
   no socket is connected when it runs. A suspend ate started by itself (`if_idle`: the idle
   policy, a pressure suspend) gives way instead when a replica has a request in flight: the
   PENDING snapshot is dropped and the actor keeps running (`abandoned`).
3. checkpoint: `atelet_checkpoint` writes the snapshot with the template's onCommit scope to its
   storage location; the atelet stops the sandbox and frees the worker. From PAUSED there is
   no sandbox: `atelet_copy_snapshot` uploads the local snapshot instead (the atelet of the node
   holding it copies it, verified, to the storage location).
4. finalize: `complete_suspend` marks the snapshot COMPLETED (with the manifest), the actor
   SUSPENDED with it as latest, and frees the place, in one transaction. A snapshot is never
   promoted without its data: only the manifest returned by a finished checkpoint completes it.
   Since the patch CHECKPOINT_COMPLETES_PATCH the `atelet_checkpoint` activity commits it itself
   as soon as the atelet answers (`complete_suspend`), so the commit's NOTIFY, on which the
   api-server answers the suspend, does not wait for a workflow task; the step runs only when
   that commit did not happen (Postgres was down) and for runs from before the patch. When the
   checkpoint step fails after an attempt committed (its answer was lost), `suspend_completed`
   tells the workflow, and it is not rolled back.
If the checkpoint fails for good, the actor goes back to RUNNING (its sandbox still runs), or
to PAUSED when the upload failed (its local snapshot is still on its node); the PENDING
snapshot row is dropped. An uploaded local snapshot is left to the snapshot GC.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.steps import (
    atelet_step,
    counted,
    db_step,
    drain_routers,
    drop_snapshot,
    reraise,
    settle_snapshot,
    show_step,
)

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletCheckpointInput, AteletCheckpointResult, AteletCopyInput
    from domain.operations.suspend import (
        BeginSuspendInput,
        SuspendActorInput,
        SuspendActorResult,
        SuspendCompletedInput,
        SuspendPlan,
    )
    from domain.operations.upload import UploadSnapshotInput, UploadSnapshotResult
    from domain.refs import SnapshotRef
    from domain.states import Operation, SnapshotStorage
    from domain.temporal import WORKFLOW_TASK_TIMEOUT, upload_workflow_id
    from workflows.search_attributes import operation_attributes

ABANDONED = "a request came in before the checkpoint: the actor keeps running"
"""The history's word for an idle (or pressure) suspend that gave way to traffic."""

CHECKPOINT_COMPLETES_PATCH = "checkpoint-completes-suspend"
"""The `workflow.patched` ID of the checkpoint step that completes the suspend itself; runs
recorded before it replay with their own `complete_suspend` step."""


@workflow.defn(name=Operation.SUSPEND.value)
class SuspendActorWorkflow:
    """Suspend one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    @workflow.run
    async def run(self, request: SuspendActorInput) -> SuspendActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.SUSPEND.value, self._run(request), lambda r: "abandoned" if r.abandoned else "ok")

    async def _run(self, request: SuspendActorInput) -> SuspendActorResult:
        """Suspend `request.actor` (sync: the snapshot is stored before this returns).

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (state), or the atelet's reason
                when the checkpoint failed (the actor is then RUNNING again).
        """
        operation_id = workflow.info().run_id
        actor = request.actor
        timings: dict[str, float] = {}
        show_step("mark suspending" + (f" ({request.reason})" if request.reason else ""))
        started = workflow.time()
        plan: SuspendPlan = await db_step(
            Activity.BEGIN_SUSPEND,
            BeginSuspendInput(actor=actor, operation_id=operation_id, mode=request.mode, reason=request.reason),
            result_type=SuspendPlan,
        )
        timings["mark"] = workflow.time() - started
        if plan.already_suspended:
            return SuspendActorResult(actor=actor, already_suspended=True, timings=timings)
        assert plan.snapshot is not None
        started = workflow.time()
        complete = False
        try:
            done: AteletCheckpointResult
            if plan.upload_from is not None:
                assert plan.atelet_address is not None
                show_step(f"upload paused snapshot from node {plan.upload_from.node}")
                done = await atelet_step(
                    Activity.ATELET_COPY_SNAPSHOT,
                    AteletCopyInput(
                        operation_id=operation_id,
                        atelet_address=plan.atelet_address,
                        source=plan.upload_from,
                        destination=plan.snapshot,
                    ),
                    result_type=AteletCheckpointResult,
                )
            else:
                assert plan.worker is not None
                drained = await drain_routers(actor, operation_id, if_idle=request.if_idle)
                if drained is not None:
                    timings["drain"] = drained.waited_seconds
                    if request.if_idle and drained.busy:  # an idle or pressure suspend gives way to the request in flight
                        show_step(f"abandoned: a request is in flight on {', '.join(drained.busy)}")
                        await drop_snapshot(actor, operation_id, plan.snapshot.snapshot_id, ABANDONED, abandoned=True)
                        return SuspendActorResult(actor=actor, abandoned=True, timings=timings)
                started = workflow.time()
                show_step(f"checkpoint {plan.snapshot.scope.value} on worker {plan.worker.pool}/{plan.worker.name}")
                complete = workflow.patched(CHECKPOINT_COMPLETES_PATCH)
                done = await atelet_step(
                    Activity.ATELET_CHECKPOINT,
                    AteletCheckpointInput(
                        operation_id=operation_id,
                        worker=plan.worker,
                        holder=actor,
                        snapshot=plan.snapshot,
                        complete_suspend=complete,
                    ),
                    result_type=AteletCheckpointResult,
                )
        except ApplicationError as error:
            if complete and await db_step(
                Activity.SUSPEND_COMPLETED,
                SuspendCompletedInput(actor=actor, snapshot_id=plan.snapshot.snapshot_id),
                result_type=bool,
            ):
                # An attempt completed the suspend and its answer was lost: nothing to roll back.
                return await self._finish(request, plan.snapshot, timings, started, None)
            show_step("rollback")
            await drop_snapshot(actor, operation_id, plan.snapshot.snapshot_id, error.message)
            kept = "it stays PAUSED" if plan.upload_from is not None else "it keeps running"
            raise reraise(error, f"suspend of actor {actor.key} failed; {kept}: ") from error
        return await self._finish(request, plan.snapshot, timings, started, done)

    async def _finish(
        self,
        request: SuspendActorInput,
        snapshot: SnapshotRef,
        timings: dict[str, float],
        started: float,
        done: AteletCheckpointResult | None,
    ) -> SuspendActorResult:
        """The finalize, unless the checkpoint's activity completed the suspend itself (or an
        earlier attempt did: `done` None or `completed_earlier`), then the upload of an async
        suspend's local snapshot."""
        actor, operation_id = request.actor, workflow.info().run_id
        timings["atelet"] = workflow.time() - started
        if done is not None:
            timings.update({f"atelet_{k}": v for k, v in done.timings.items()})
        if done is not None and done.completed_at is None and not done.completed_earlier:
            show_step("finalize")
            started = workflow.time()
            await settle_snapshot(Activity.COMPLETE_SUSPEND, actor, operation_id, snapshot.snapshot_id, done)
            timings["finalize"] = workflow.time() - started
        upload_id = None
        if snapshot.storage == SnapshotStorage.LOCAL:
            upload_id = await self._start_upload(request, snapshot.snapshot_id)
        cut = done.egress_cut if done is not None else 0
        said = f"; cut {cut} outbound connection(s) still open at the egress drain timeout" if cut else ""
        show_step(("done" if upload_id is None else f"done; uploading in {upload_id}") + said)
        return SuspendActorResult(
            actor=actor, generation=snapshot.generation, timings=timings, upload_workflow_id=upload_id,
            egress_cut=cut,
        )  # fmt: skip

    @staticmethod
    async def _start_upload(request: SuspendActorInput, local_snapshot_id: int) -> str:
        """Start (once) the UploadSnapshot workflow of an async suspend's local snapshot; it
        outlives this workflow. Returns its workflow ID."""
        actor = request.actor
        upload_id = upload_workflow_id(actor.atespace, actor.name, local_snapshot_id)
        try:
            await workflow.start_child_workflow(
                Operation.UPLOAD.value,
                UploadSnapshotInput(actor=actor, local_snapshot_id=local_snapshot_id),
                id=upload_id,
                result_type=UploadSnapshotResult,
                task_timeout=WORKFLOW_TASK_TIMEOUT,
                parent_close_policy=ParentClosePolicy.ABANDON,
                search_attributes=operation_attributes(actor.atespace, actor.name, Operation.UPLOAD.value),
            )
        except WorkflowAlreadyStartedError:
            pass  # started by an earlier attempt of this step
        return upload_id
