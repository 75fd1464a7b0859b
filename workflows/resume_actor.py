"""ResumeActor: SUSPENDED|PAUSED -> RESUMING -> RUNNING (placement, atelet restore, finalize).

Steps (each an idempotent local activity keyed by this run's ID as operation ID):
1. placement: `begin_resume` chooses a worker and binds it, marking RESUMING (one transaction).
   A PAUSED actor is placed on the node holding its local snapshot; when that node is full
   and another has room, the local snapshot is first uploaded (`workflows.detach`) and the
   actor placed anywhere.
2. restore: `atelet_start` restores the latest snapshot (or the golden one) onto the worker and
   waits for the wakeup probes.
3. finalize: RESUMING -> RUNNING. Since the patch FINALIZE_IN_RESTORE_PATCH the `atelet_start`
   activity commits it itself as soon as the restore answers (`mark_running`), so the commit's
   NOTIFY, on which the api-server answers the resume, does not wait for the activity's
   completion to travel through the Temporal server and a workflow task (~6 ms; bench/README.md,
   "activation"). The `finish_resume` step runs only when that commit did not happen (Postgres
   was down: the step retries through a restart), and for runs from before the patch. When the
   restore step fails after an attempt committed (its answer was lost), `resume_finished` tells
   the workflow the actor is RUNNING, and it is not rolled back.
If the restore fails for good, the sandbox is terminated and the actor rolled back to
SUSPENDED (PAUSED when it came from there) with its worker freed: never left in RESUMING with a worker held (the reference
system's failure #1665).
"""

from __future__ import annotations

from typing import NoReturn

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
    from domain.refs import ActorRef, WorkerRef
    from domain.states import Operation

FINALIZE_IN_RESTORE_PATCH = "finalize-in-restore"
"""The `workflow.patched` ID of the restore step that marks the actor RUNNING itself; runs recorded
before it replay with their own `finish_resume` step."""


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
        mark_running = workflow.patched(FINALIZE_IN_RESTORE_PATCH)
        restored: AteletRunResult | None
        try:
            restored = await atelet_step(
                "atelet_start",
                AteletRunInput(
                    operation_id=operation_id,
                    worker=plan.worker,
                    holder=actor,
                    spec=plan.spec,
                    snapshot=plan.snapshot,
                    probe_timeout_seconds=request.probe_timeout_seconds,
                    mark_running=mark_running,
                ),
                result_type=AteletRunResult,
                timeout=boot_timeout(request.probe_timeout_seconds),
            )
        except ApplicationError as error:
            if error.type == "Superseded":  # a revert took the actor over: nothing here is ours to undo
                raise
            finish = FinishInput(actor=actor, operation_id=operation_id)
            if not (mark_running and await db_step("resume_finished", finish, result_type=bool)):
                await self._roll_back(plan.worker, actor, operation_id, error)
            restored = None  # an attempt marked the actor RUNNING and its answer was lost: done
        timings["atelet"] = workflow.time() - started
        if restored is not None:
            timings.update({f"atelet_{k}": v for k, v in restored.timings.items()})
        if restored is not None and restored.marked_running_at is None:
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
            snapshot_cache_hit=restored.snapshot_cache_hit if restored is not None else False,
        )

    async def _roll_back(
        self, worker: WorkerRef, actor: ActorRef, operation_id: str, error: ApplicationError
    ) -> NoReturn:
        """Undo a resume whose restore failed for good: terminate the sandbox (or fence the
        worker when that fails), then RESUMING -> SUSPENDED (or PAUSED) with the worker freed.

        Raises:
            ApplicationError: always: `error`'s type, its message prefixed with what happened.
        """
        show_step("rollback")
        try:
            await atelet_step(
                "atelet_terminate",
                AteletTerminateInput(operation_id=operation_id, worker=worker, holder=actor),
                result_type=bool,
            )
        except ApplicationError:
            # The sandbox may still be there: keep the worker out of placement until its
            # atelet reports it idle (or is told to stop the stray at its next heartbeat).
            await db_step(
                "fence_worker",
                FenceInput(
                    worker_id=worker.worker_id,
                    reason=f"fenced: terminate of {actor.key} failed after a failed restore",
                ),
            )
        await db_step("rollback_resume", FinishInput(actor=actor, operation_id=operation_id, error=error.message))
        raise reraise(error, f"resume of actor {actor.key} failed and was rolled back: ") from error
