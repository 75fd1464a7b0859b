"""ExecInActor: a command run inside a RUNNING actor's sandbox (`ate exec`), for debugging.

Steps (operation ID = this run's ID):
1. begin: `begin_exec` finds the RUNNING actor's worker and records the exec in the actor's
   history with who asked and what (`by alice: cat /data/count.txt`); refused when the actor is
   not RUNNING or an operation holds it.
2. exec: `atelet_exec` runs the command on that worker until it ends: by itself, at its timeout,
   or because a checkpoint of the sandbox ended it (`suspended`). Run once: an exec is not
   idempotent, so a lost answer is a failure, never a second run.
3. finish: `finish_exec` records the outcome (`exit 0`, `timeout`, `suspended`; `failed` with
   the atelet's reason).

The workflow ID is `exec/<atespace>/<name>/<id>`, not the actor's lock: a suspend or a pause is
never kept waiting by an exec (`domain.operations.exec`).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from workflows.steps import ACTIVITY_FAILURES, ATELET_HEARTBEAT_TIMEOUT, counted, db_step, reraise, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.exec import (
        EXEC_CALL_MARGIN_SECONDS,
        EXEC_WORKFLOW,
        AteletExecInput,
        BeginExecInput,
        ExecInput,
        ExecResult,
        FinishExecInput,
    )
    from domain.refs import WorkerRef

ONCE = RetryPolicy(maximum_attempts=1)


def outcome_of_exec(result: ExecResult) -> str:
    """`exit <status>`, or what ended it (`timeout`, `suspended`, `stopped`)."""
    return result.ended or f"exit {result.exit_code}"


@workflow.defn(name=EXEC_WORKFLOW)
class ExecInActorWorkflow:
    """Run one command in one actor's sandbox (module doc)."""

    @workflow.run
    async def run(self, request: ExecInput) -> ExecResult:
        """Run the exec, counting it by outcome (see `_run`)."""
        return await counted(EXEC_WORKFLOW, self._run(request), lambda r: "ok" if not r.ended else r.ended)

    async def _run(self, request: ExecInput) -> ExecResult:
        """Begin, exec, finish (module doc).

        Raises:
            ApplicationError: type NotFound, FailedPrecondition (not RUNNING), or the atelet's
                reason when the command could not be run.
        """
        operation_id = workflow.info().run_id
        command = " ".join(request.command)
        reason = f"by {request.requested_by}: {command[:200]}"
        show_step(f"begin ({reason})")
        worker: WorkerRef = await db_step(
            Activity.BEGIN_EXEC, BeginExecInput(actor=request.actor, operation_id=operation_id, reason=reason),
            result_type=WorkerRef,
        )  # fmt: skip
        show_step(f"exec on worker {worker.pool}/{worker.name}")
        try:
            result: ExecResult = await workflow.execute_activity(
                Activity.ATELET_EXEC.value,
                AteletExecInput(operation_id=operation_id, worker=worker, holder=request.actor,
                                command=request.command, timeout_seconds=request.timeout_seconds),
                result_type=ExecResult,
                start_to_close_timeout=timedelta(seconds=request.timeout_seconds + 2 * EXEC_CALL_MARGIN_SECONDS),
                heartbeat_timeout=ATELET_HEARTBEAT_TIMEOUT,
                retry_policy=ONCE,
            )  # fmt: skip
        except ACTIVITY_FAILURES as error:
            failure: ApplicationError = reraise(error)
            await db_step(Activity.FINISH_EXEC, FinishExecInput(operation_id, "failed", failure.message))
            raise failure from error
        await db_step(Activity.FINISH_EXEC, FinishExecInput(operation_id, outcome_of_exec(result)))
        show_step(f"done: {outcome_of_exec(result)}")
        return result
