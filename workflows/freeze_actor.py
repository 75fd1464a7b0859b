"""FreezeActor: RUNNING -> FROZEN (the hot tier: the sandbox stops in place, keeps its worker and
memory, uses no CPU; the next resume thaws it in milliseconds).

Steps (operation ID = this run's ID, each idempotent):
1. mark: `begin_freeze` writes FROZEN under this operation, with its reason in the actor's
   history (`idle for 20 s`); the routers drop the actor from their caches at its NOTIFY, and a
   request that arrives now parks and resumes (thaws) it after this operation.
2. drain: `drain_routers` lets every live router replica finish what it has in flight and close
   its connections to the worker (a frozen sandbox answers nothing: a connection left open would
   hang). With `if_idle` (the idle policy started it) a replica with a request in flight answers
   busy instead, and the freeze gives way: the actor goes back to RUNNING (`rollback_freeze`),
   untouched.
3. freeze: `atelet_freeze` stops the sandbox (the kernel's cgroup freezer, or a stopped VM).
4. finish: `finish_freeze` records the operation done; the actor rests FROZEN.
If the atelet refuses (the sandbox was not touched), the actor goes back to RUNNING
(`rollback_freeze`); if it fails otherwise (unreachable, timed out: it may have frozen the
sandbox), the actor rests FROZEN, since its next resume's thaw is a no-op on a running sandbox.
Either way the atelet's reason is raised.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import atelet_step, counted, db_step, drain_routers, reraise, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.freeze import (
        AteletFreezeInput,
        AteletFreezeResult,
        BeginFreezeInput,
        FinishFreezeInput,
        FreezeActorInput,
        FreezeActorResult,
        FreezePlan,
    )
    from domain.reasons import Reason
    from domain.states import Operation


NOT_FROZEN = frozenset({Reason.ATELET_FAILED_PRECONDITION, Reason.ATELET_NOT_FOUND, Reason.ATELET_INVALID_ARGUMENT})
"""The atelet's refusals that say it did not touch the sandbox: the actor goes back to RUNNING.
Any other failure (unreachable, timed out) leaves it FROZEN, the state that is safe either way."""


def _outcome(result: FreezeActorResult) -> str:
    return "abandoned" if result.abandoned else "ok"


@workflow.defn(name=Operation.FREEZE.value)
class FreezeActorWorkflow:
    """Freeze one actor; the workflow ID `actor/<atespace>/<name>` is the per-actor lock."""

    @workflow.run
    async def run(self, request: FreezeActorInput) -> FreezeActorResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.FREEZE.value, self._run(request), _outcome)

    async def _run(self, request: FreezeActorInput) -> FreezeActorResult:
        """Freeze `request.actor` (module doc).

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (state), or the atelet's reason
                when the sandbox could not be stopped (the actor is then RUNNING again).
        """
        operation_id = workflow.info().run_id
        actor = request.actor
        timings: dict[str, float] = {}
        show_step("mark frozen" + (f" ({request.reason})" if request.reason else ""))
        started = workflow.time()
        plan: FreezePlan = await db_step(
            Activity.BEGIN_FREEZE,
            BeginFreezeInput(actor=actor, operation_id=operation_id, reason=request.reason),
            result_type=FreezePlan,
        )
        timings["mark"] = workflow.time() - started
        if plan.already_frozen:
            return FreezeActorResult(actor=actor, already_frozen=True, timings=timings)
        assert plan.worker is not None
        finish = FinishFreezeInput(actor=actor, operation_id=operation_id)
        drained = await drain_routers(actor, operation_id, if_idle=request.if_idle)
        if drained is not None:
            timings["drain"] = drained.waited_seconds
            if request.if_idle and drained.busy:
                show_step(f"abandoned: a request is in flight on {', '.join(drained.busy)}")
                await db_step(Activity.ROLLBACK_FREEZE, finish)
                return FreezeActorResult(actor=actor, abandoned=True, timings=timings)
        show_step(f"freeze on worker {plan.worker.pool}/{plan.worker.name}")
        started = workflow.time()
        try:
            frozen: AteletFreezeResult = await atelet_step(
                Activity.ATELET_FREEZE,
                AteletFreezeInput(operation_id=operation_id, worker=plan.worker, holder=actor),
                result_type=AteletFreezeResult,
            )
        except ApplicationError as error:
            settled = FinishFreezeInput(actor=actor, operation_id=operation_id, error=error.message)
            if error.type in NOT_FROZEN:  # the atelet refused: the sandbox was not touched
                show_step("rollback")
                await db_step(Activity.ROLLBACK_FREEZE, settled)
                raise reraise(error, f"freeze of actor {actor.key} failed; it keeps running: ") from error
            # The atelet may have frozen it before it stopped answering: FROZEN is the safe answer
            # (the next resume's thaw is a no-op on a sandbox that runs).
            show_step("rests FROZEN (outcome unknown)")
            await db_step(Activity.FINISH_FREEZE, settled)
            raise reraise(error, f"freeze of actor {actor.key} may not have completed; it rests FROZEN and its next "
                          "request thaws it: ") from error  # fmt: skip
        timings["atelet"] = workflow.time() - started
        timings["atelet_freeze"] = frozen.seconds
        await db_step(Activity.FINISH_FREEZE, finish)
        show_step("done")
        return FreezeActorResult(actor=actor, timings=timings)
