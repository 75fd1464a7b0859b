"""GoldenSnapshot: boot a template once, wait for its wakeup probes, checkpoint FULL.

The result is the snapshot every new actor of the template restores on its first resume.
The template ends in phase Ready (with the snapshot) or Failed (with the reason); the worker
used for the boot is always released (the reference system leaked its golden actor, #879).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import atelet_step, boot_timeout, counted, db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import (
        AteletCheckpointInput,
        AteletCheckpointResult,
        AteletRunInput,
        AteletRunResult,
        AteletTerminateInput,
    )
    from domain.operations.common import FinishInput
    from domain.operations.golden import GoldenPlan, GoldenSnapshotInput, GoldenSnapshotResult
    from domain.operations.suspend import CompleteSnapshotInput
    from domain.reasons import Reason
    from domain.refs import ActorRef
    from domain.states import Operation
    from domain.temporal import template_workflow_id


@workflow.defn(name=Operation.GOLDEN_SNAPSHOT.value)
class GoldenSnapshotWorkflow:
    """Take one template's golden snapshot; workflow ID `template/<atespace>/<name>`."""

    @workflow.run
    async def run(self, request: GoldenSnapshotInput) -> GoldenSnapshotResult:
        """Run the operation, counting it by outcome (see `_run` for what it does)."""
        return await counted(Operation.GOLDEN_SNAPSHOT.value, self._run(request), lambda result: result.phase)

    async def _run(self, request: GoldenSnapshotInput) -> GoldenSnapshotResult:
        """Boot, probe, checkpoint. Never raises for a workload failure: returns phase Failed."""
        operation_id = workflow.info().run_id
        template = ActorRef(atespace=request.atespace, name=request.template)
        holder = ActorRef(atespace=request.atespace, name=f"golden-{request.template}"[:63])
        show_step("placement")
        waited = 0.0
        while True:
            try:
                plan: GoldenPlan = await db_step(Activity.BEGIN_GOLDEN, request, result_type=GoldenPlan)
                break
            except ApplicationError as error:
                if error.type != Reason.NO_CAPACITY or waited >= request.placement_wait_seconds:
                    return await self._fail(template, operation_id, error.message)
                # Every worker busy is a moment, not a verdict: wait for one to free up.
                show_step(f"waiting for a free worker ({waited:.0f} s so far): {error.message}")
                pause = min(5.0, max(0.5, waited / 4))
                await workflow.sleep(pause)
                waited += pause
        try:
            show_step(f"boot on worker {plan.worker.pool}/{plan.worker.name}")
            await atelet_step(
                Activity.ATELET_START,
                AteletRunInput(
                    operation_id=operation_id,
                    worker=plan.worker,
                    holder=holder,
                    spec=plan.spec,
                    snapshot=None,
                    probe_timeout_seconds=request.probe_timeout_seconds,
                    placement=template_workflow_id(request.atespace, request.template),
                    template=request.template,
                    golden=True,
                ),
                result_type=AteletRunResult,
                timeout=boot_timeout(request.probe_timeout_seconds),
            )
            show_step("checkpoint FULL")
            done: AteletCheckpointResult = await atelet_step(
                Activity.ATELET_CHECKPOINT,
                AteletCheckpointInput(
                    operation_id=operation_id,
                    worker=plan.worker,
                    holder=holder,
                    snapshot=plan.snapshot,
                    placement=template_workflow_id(request.atespace, request.template),
                ),
                result_type=AteletCheckpointResult,
            )
        except ApplicationError as error:
            if error.type == Reason.SUPERSEDED:  # the template was recreated meanwhile
                return GoldenSnapshotResult(phase="Superseded", reason=error.message)
            show_step("cleanup")
            try:
                await atelet_step(
                    Activity.ATELET_TERMINATE,
                    AteletTerminateInput(operation_id=operation_id, worker=plan.worker, holder=holder),
                    result_type=bool,
                )
            except ApplicationError:
                workflow.logger.warning("terminate after a failed golden boot did not succeed")
            return await self._fail(template, operation_id, error.message)
        show_step("finalize")
        await db_step(
            Activity.COMPLETE_GOLDEN,
            CompleteSnapshotInput(
                actor=template,
                operation_id=operation_id,
                snapshot_id=plan.snapshot.snapshot_id,
                manifest=done.manifest,
                size_bytes=done.size_bytes,
            ),
        )
        show_step("done")
        return GoldenSnapshotResult(phase="Ready", snapshot_id=plan.snapshot.snapshot_id)

    async def _fail(self, template: ActorRef, operation_id: str, reason: str) -> GoldenSnapshotResult:
        show_step("failed")
        await db_step(Activity.FAIL_GOLDEN, FinishInput(actor=template, operation_id=operation_id, error=reason))
        return GoldenSnapshotResult(phase="Failed", reason=reason)
