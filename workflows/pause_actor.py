"""PauseActor: RUNNING -> PAUSING -> PAUSED (the checkpoint stays on the node).

A pause is a suspend whose snapshot is LOCAL: written to the worker's node, not to the storage
location, so it is quick to take and to restore, but only that node can restore it. The actor is
pinned to the node until the snapshot is consumed (resume), uploaded (suspend) or dropped
(revert). The last snapshot in the storage location stays the actor's latest, which is what a
revert returns to.

Steps (idempotent local activities, operation ID = this run's ID):
1. mark: `begin_pause` marks PAUSING and reserves the next generation as a PENDING LOCAL
   snapshot at `local:///<atespace>/actors/<name>/<gen>-<op>` on the worker's node.
2. drain: `drain_routers` has every live router replica stop sending the actor new requests,
   finish or cut those in flight and close its worker connections (see SuspendActor); a pause ate
   started by itself (`if_idle`) gives way to a request in flight instead (`abandoned`).
3. checkpoint: `atelet_checkpoint` writes it with the template's onPause scope; the atelet stops
   the sandbox and frees the worker.
4. finalize: `complete_pause` marks the snapshot COMPLETED (with the manifest) and the actor
   PAUSED, pinned to the node, its place freed, in one transaction.
If the checkpoint fails for good, the actor goes back to RUNNING and the PENDING row is dropped.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

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
from workflows.suspend_actor import ABANDONED

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletCheckpointInput, AteletCheckpointResult
    from domain.operations.pause import PauseActorInput, PauseActorResult, PausePlan
    from domain.operations.suspend import BeginSuspendInput
    from domain.states import Operation


@workflow.defn(name=Operation.PAUSE.value)
class PauseActorWorkflow:
    """Pause one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    @workflow.run
    async def run(self, request: PauseActorInput) -> PauseActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.PAUSE.value, self._run(request), lambda r: "abandoned" if r.abandoned else "ok")

    async def _run(self, request: PauseActorInput) -> PauseActorResult:
        """Pause `request.actor`: its checkpoint is on its node when this returns.

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (state), or the atelet's reason
                when the checkpoint failed (the actor is then RUNNING again).
        """
        operation_id = workflow.info().run_id
        actor = request.actor
        timings: dict[str, float] = {}
        show_step("mark pausing" + (f" ({request.reason})" if request.reason else ""))
        started = workflow.time()
        plan: PausePlan = await db_step(
            Activity.BEGIN_PAUSE,
            BeginSuspendInput(actor=actor, operation_id=operation_id, reason=request.reason),
            result_type=PausePlan,
        )
        timings["mark"] = workflow.time() - started
        if plan.already_paused:
            return PauseActorResult(actor=actor, already_paused=True, timings=timings)
        assert plan.worker is not None and plan.snapshot is not None
        started = workflow.time()
        try:
            drained = await drain_routers(actor, operation_id, if_idle=request.if_idle)
            if drained is not None:
                timings["drain"] = drained.waited_seconds
                if request.if_idle and drained.busy:  # an idle or pressure pause gives way to the request in flight
                    show_step(f"abandoned: a request is in flight on {', '.join(drained.busy)}")
                    await drop_snapshot(actor, operation_id, plan.snapshot.snapshot_id, ABANDONED, abandoned=True)
                    return PauseActorResult(actor=actor, abandoned=True, timings=timings)
            started = workflow.time()
            show_step(f"local checkpoint {plan.snapshot.scope.value} on worker {plan.worker.pool}/{plan.worker.name}")
            done: AteletCheckpointResult = await atelet_step(
                Activity.ATELET_CHECKPOINT,
                AteletCheckpointInput(
                    operation_id=operation_id, worker=plan.worker, holder=actor, snapshot=plan.snapshot
                ),
                result_type=AteletCheckpointResult,
            )
        except ApplicationError as error:
            show_step("rollback")
            await drop_snapshot(actor, operation_id, plan.snapshot.snapshot_id, error.message)
            raise reraise(error, f"pause of actor {actor.key} failed; it keeps running: ") from error
        timings["atelet"] = workflow.time() - started
        timings.update({f"atelet_{k}": v for k, v in done.timings.items()})
        show_step("finalize")
        started = workflow.time()
        await settle_snapshot(Activity.COMPLETE_PAUSE, actor, operation_id, plan.snapshot.snapshot_id, done)
        timings["finalize"] = workflow.time() - started
        show_step("done")
        return PauseActorResult(
            actor=actor, generation=plan.snapshot.generation, node=plan.worker.node, timings=timings
        )
