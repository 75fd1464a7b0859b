"""EvictionDeadline: drain a node. Suspend its actors now; at the deadline, crash what is left.

Started when a node is drained (`ate drain node`, or its atelet on SIGTERM, which is how a
Kubernetes pod eviction arrives). Steps:
1. `begin_drain`: the node's workers become UNAVAILABLE (draining): no new actor lands there.
2. A SuspendActor child workflow per RUNNING actor and per PAUSED actor whose local snapshot
   lies on the node (the suspend uploads it), under the actor's own workflow ID (so it
   takes the per-actor lock like any suspend); an actor busy with another operation is left to
   it and checked again below.
3. Until the deadline (default 30 min, as in the reference system), every 10 s: anything still
   on the node's workers? At the deadline: terminate each leftover sandbox (best effort) and
   mark the actor CRASHED; its last COMPLETED snapshot stays, so `ate revert` brings it back.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.steps import atelet_step, db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletTerminateInput
    from domain.operations.drain import (
        BeginDrainInput,
        CrashInput,
        DrainPlan,
        EvictionDeadlineInput,
        EvictionDeadlineResult,
        Leftover,
    )
    from domain.operations.suspend import SuspendActorInput, SuspendActorResult
    from domain.states import Operation
    from domain.temporal import WORKFLOW_TASK_TIMEOUT
    from workflows.search_attributes import operation_attributes

EVICTION = "EvictionDeadline"
CHECK_EVERY = timedelta(seconds=10)


@workflow.defn(name=EVICTION)
class EvictionDeadlineWorkflow:
    """Drain one node; workflow ID `node/<node>/drain`."""

    @workflow.run
    async def run(self, request: EvictionDeadlineInput) -> EvictionDeadlineResult:
        """Suspend the node's actors; crash what is still there at the deadline."""
        deadline = workflow.now() + timedelta(seconds=request.deadline_seconds)
        result = EvictionDeadlineResult(node=request.node)
        show_step("mark draining")
        plan: DrainPlan = await db_step(
            Activity.BEGIN_DRAIN, BeginDrainInput(node=request.node, deadline_seconds=request.deadline_seconds), DrainPlan
        )
        show_step(f"suspend {len(plan.running)} actors")
        children = []
        for actor in plan.running:
            try:
                children.append(
                    await workflow.start_child_workflow(
                        Operation.SUSPEND.value,
                        SuspendActorInput(actor=actor),
                        id=actor.workflow_id,
                        # No task_queue: the child inherits this workflow's (ate-control; a test's own queue).
                        task_timeout=WORKFLOW_TASK_TIMEOUT,
                        result_type=SuspendActorResult,
                        parent_close_policy=ParentClosePolicy.ABANDON,
                        search_attributes=operation_attributes(actor.atespace, actor.name, Operation.SUSPEND.value),
                    )
                )
            except (WorkflowAlreadyStartedError, ChildWorkflowError):
                workflow.logger.info("actor %s is busy with another operation; checked again later", actor.key)
        for child in children:
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                break
            try:
                done: SuspendActorResult = await asyncio.wait_for(child, timeout=remaining)
                result.suspended.append(done.actor.key)
            except (ChildWorkflowError, TimeoutError):
                continue
        while True:
            leftovers: list[Leftover] = await db_step(Activity.DRAIN_LEFTOVERS, request.node, list[Leftover])
            if not leftovers:
                show_step("drained")
                return result
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                break
            show_step(f"waiting: {len(leftovers)} actors left, deadline in {remaining:.0f} s")
            await workflow.sleep(min(CHECK_EVERY.total_seconds(), remaining))
        show_step(f"deadline passed: crashing {len(leftovers)} actors")
        for left in leftovers:
            if left.worker is not None:
                try:
                    await atelet_step(
                        Activity.ATELET_TERMINATE,
                        # One operation ID per leftover: the atelet answers a repeated ID with
                        # the first call's result, so a shared one would terminate only the first.
                        AteletTerminateInput(
                            operation_id=f"{workflow.info().run_id}/{left.actor.key}",
                            worker=left.worker,
                            holder=left.actor,
                        ),
                        bool,
                    )
                except ApplicationError:
                    workflow.logger.warning("could not terminate %s on its drained node", left.actor.key)
            what = "suspended" if left.worker is not None else "uploaded from its paused snapshot"
            await db_step(
                Activity.CRASH_AFTER_DEADLINE,
                CrashInput(
                    actor=left.actor,
                    worker_id=left.worker.worker_id if left.worker is not None else None,
                    node=request.node,
                    reason=f"eviction deadline passed: node {request.node} was drained and the actor was not "
                    f"{what} within {request.deadline_seconds:g} s",
                ),
            )
            result.crashed.append(left.actor.key)
        show_step("done")
        return result
