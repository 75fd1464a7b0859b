"""RevertActor: RUNNING | UNREACHABLE | PAUSED | CRASHED | stuck RESUMING/SUSPENDING -> REVERTING -> SUSPENDED.

The actor goes back to its last COMPLETED snapshot, or to a kept earlier generation of its own
(`to_generation`, which also takes a SUSPENDED actor); a PENDING snapshot is discarded. Started by
a user, by a forced delete, or by the api-server for a CRASHED actor whose template says
`onCrash: Revert` (`recovery_of` set; api.recovery). Steps:
1. mark: `begin_revert` marks REVERTING and says which worker held the actor and whether its
   node is alive.
2. terminate: the atelet stops the sandbox. When the node is gone (or does not answer), the
   worker is fenced instead — kept out of placement until its atelet reports it idle, and the
   atelet is told to stop the sandbox at its next heartbeat — and the revert finishes anyway
   (the reference system stayed in REVERTING until the dead node came back).
3. drain: when the actor held a worker, `drain_routers` has every live router replica forget it
   and close its connections to that worker before the worker is freed, so no router sends a
   request of this actor to the worker once it hosts another actor (the NOTIFY of REVERTING
   alone makes that only likely); it waits `REVERT_DRAIN_MAX_SECONDS` at most, and a drain that
   fails for good does not stop the revert.
4. finalize: `finish_revert` marks SUSPENDED and frees the place.
The API cancels a stuck operation on the actor before starting this workflow under the same ID.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import (
    REVERT_DRAIN_MAX_SECONDS,
    REVERT_ROUTER_DRAIN_PATCH,
    atelet_step,
    counted,
    db_step,
    drain_routers,
    show_step,
)

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletTerminateInput
    from domain.operations.revert import (
        BeginRevertInput,
        FenceInput,
        FinishRevertInput,
        RevertActorInput,
        RevertActorResult,
        RevertPlan,
    )
    from domain.states import Operation


@workflow.defn(name=Operation.REVERT.value)
class RevertActorWorkflow:
    """Revert one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    @workflow.run
    async def run(self, request: RevertActorInput) -> RevertActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.REVERT.value, self._run(request))

    async def _run(self, request: RevertActorInput) -> RevertActorResult:
        """Revert `request.actor` to SUSPENDED with its last COMPLETED snapshot.

        Raises:
            ApplicationError: type NotFound, or FailedPrecondition (`not in a revertable state`).
        """
        operation_id = workflow.info().run_id
        actor = request.actor
        show_step("mark reverting")
        plan: RevertPlan = await db_step(
            Activity.BEGIN_REVERT,
            BeginRevertInput(actor=actor, operation_id=operation_id, to_generation=request.to_generation),
            RevertPlan,
        )
        fenced = False
        if plan.worker is not None:
            worker = plan.worker
            if plan.node_alive:
                show_step(f"terminate on worker {worker.pool}/{worker.name} ({worker.node})")
                try:
                    await atelet_step(
                        Activity.ATELET_TERMINATE,
                        AteletTerminateInput(operation_id=operation_id, worker=worker, holder=actor),
                        bool,
                    )
                except ApplicationError:
                    fenced = True
            else:
                fenced = True
            if fenced:
                show_step(f"fence worker {worker.pool}/{worker.name}: node {worker.node} unreachable")
                await db_step(
                    Activity.FENCE_WORKER,
                    FenceInput(
                        worker_id=worker.worker_id,
                        reason=f"fenced: {actor.key} was reverted while node {worker.node} was unreachable",
                    ),
                )
        if plan.worker is not None:
            try:
                await drain_routers(actor, operation_id, REVERT_ROUTER_DRAIN_PATCH, REVERT_DRAIN_MAX_SECONDS)
            except ApplicationError as error:
                workflow.logger.warning("revert of %s: the routers were not drained (%s)", actor.key, error.message)
        show_step("finalize")
        note = f"reverted from {plan.from_state}" + (" (old worker fenced: its node was unreachable)" if fenced else "")
        if request.recovery_of is not None:
            note = f"{note} automatically (its template says onCrash: Revert)"
        await db_step(
            Activity.FINISH_REVERT,
            FinishRevertInput(actor=actor, operation_id=operation_id, note=note, recovery_of=request.recovery_of),
        )
        show_step("done")
        return RevertActorResult(actor=actor, from_state=plan.from_state, fenced=fenced)
