"""ResumeActor: SUSPENDED|PAUSED -> RESUMING -> RUNNING (placement, atelet restore, finalize).

Steps (each an idempotent local activity keyed by this run's ID as operation ID):
1. placement: `begin_resume` chooses a worker and binds it, marking RESUMING (one transaction).
   A PAUSED actor is placed on the node holding its local snapshot; when that node is full
   and another has room, the local snapshot is first uploaded (`workflows.detach`) and the
   actor placed anywhere.
2. restore: `atelet_start` restores the latest snapshot (or the golden one) onto the worker and
   waits for the wakeup probes.
3. finalize: `finish_resume` marks RUNNING.
If the restore fails for good, the sandbox is terminated and the actor rolled back to
SUSPENDED (PAUSED when it came from there) with its worker freed: never left in RESUMING with a worker held (the reference
system's failure #1665).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.detach import detach_paused
from workflows.steps import (
    atelet_step,
    boot_timeout,
    counted,
    db_step,
    reraise,
    show_step,
)

with workflow.unsafe.imports_passed_through():
    from domain.operations.atelet_calls import AteletRunInput, AteletRunResult, AteletTerminateInput
    from domain.operations.common import FinishInput
    from domain.operations.resume import BeginResumeInput, ResumeActorInput, ResumeActorResult, ResumePlan
    from domain.operations.revert import FenceInput
    from domain.states import Operation


@workflow.defn(name=Operation.RESUME.value)
class ResumeActorWorkflow:
    """Resume one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    @workflow.run
    async def run(self, request: ResumeActorInput) -> ResumeActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.RESUME.value, self._run(request))

    async def _run(self, request: ResumeActorInput) -> ResumeActorResult:
        """Resume `request.actor`.

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (state), NoCapacity, or the
                atelet's reason when the restore failed (the actor is then SUSPENDED again).
        """
        operation_id = workflow.info().run_id
        actor = request.actor
        timings: dict[str, float] = {}
        show_step("placement")
        started = workflow.time()
        try:
            plan: ResumePlan = await db_step(
                "begin_resume", BeginResumeInput(actor=actor, operation_id=operation_id), result_type=ResumePlan
            )
        except ApplicationError as error:
            if error.type != "PinnedNodeFull":
                raise
            await detach_paused(actor, operation_id)
            timings["detach"] = workflow.time() - started
            show_step("placement after detach")
            plan = await db_step(
                "begin_resume", BeginResumeInput(actor=actor, operation_id=operation_id), result_type=ResumePlan
            )
        timings["placement"] = workflow.time() - started
        if plan.already_running:
            return ResumeActorResult(actor=actor, worker=plan.worker, already_running=True, timings=timings)
        assert plan.worker is not None and plan.spec is not None
        show_step(f"restore on worker {plan.worker.pool}/{plan.worker.name} ({plan.worker.node})")
        started = workflow.time()
        try:
            restored: AteletRunResult = await atelet_step(
                "atelet_start",
                AteletRunInput(
                    operation_id=operation_id,
                    worker=plan.worker,
                    holder=actor,
                    spec=plan.spec,
                    snapshot=plan.snapshot,
                    probe_timeout_seconds=request.probe_timeout_seconds,
                ),
                result_type=AteletRunResult,
                timeout=boot_timeout(request.probe_timeout_seconds),
            )
        except ApplicationError as error:
            if error.type == "Superseded":  # a revert took the actor over: nothing here is ours to undo
                raise
            show_step("rollback")
            try:
                await atelet_step(
                    "atelet_terminate",
                    AteletTerminateInput(operation_id=operation_id, worker=plan.worker, holder=actor),
                    result_type=bool,
                )
            except ApplicationError:
                # The sandbox may still be there: keep the worker out of placement until its
                # atelet reports it idle (or is told to stop the stray at its next heartbeat).
                await db_step(
                    "fence_worker",
                    FenceInput(
                        worker_id=plan.worker.worker_id,
                        reason=f"fenced: terminate of {actor.key} failed after a failed restore",
                    ),
                )
            await db_step("rollback_resume", FinishInput(actor=actor, operation_id=operation_id, error=error.message))
            raise reraise(error, f"resume of actor {actor.key} failed and was rolled back: ") from error
        timings["atelet"] = workflow.time() - started
        timings.update({f"atelet_{k}": v for k, v in restored.timings.items()})
        show_step("finalize")
        started = workflow.time()
        await db_step("finish_resume", FinishInput(actor=actor, operation_id=operation_id))
        timings["finalize"] = workflow.time() - started
        show_step("done")
        return ResumeActorResult(
            actor=actor,
            worker=plan.worker,
            restored_generation=plan.snapshot.generation if plan.snapshot else None,
            timings=timings,
            snapshot_cache_hit=restored.snapshot_cache_hit,
        )
