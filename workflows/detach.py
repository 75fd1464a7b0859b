"""Detach a paused actor from its full node, inside a ResumeActor (ARCHITECTURE.md, "Placement":
"if the pinned node is full while others have room: upload the local snapshot, unpin, place
elsewhere, in the same resume"; the reference system's DetachFromFullNode).

The steps are those of a suspend from PAUSED (`begin_suspend`, `atelet_copy_snapshot`,
`complete_suspend`, or `rollback_suspend` on failure), under the operation ID
`<resume run ID>/detach` so that they are idempotent apart from the resume's own steps. The actor
goes PAUSED -> SUSPENDING -> SUSPENDED, visible like any suspend, before the resume places it.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import (
    atelet_step,
    db_step,
    drop_snapshot,
    reraise,
    settle_snapshot,
    show_step,
)

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletCheckpointResult, AteletCopyInput
    from domain.operations.suspend import BeginSuspendInput, SuspendPlan
    from domain.refs import ActorRef


async def detach_paused(actor: ActorRef, resume_operation_id: str) -> int | None:
    """Upload `actor`'s local snapshot to its storage location and unpin it.

    Returns:
        The uploaded generation (None when the actor was no longer PAUSED: nothing to do).

    Raises:
        ApplicationError: the upload failed (the actor stays PAUSED, pinned to its node).
    """
    operation_id = f"{resume_operation_id}/detach"
    show_step("detach: mark suspending")
    plan: SuspendPlan = await db_step(
        Activity.BEGIN_SUSPEND, BeginSuspendInput(actor=actor, operation_id=operation_id), result_type=SuspendPlan
    )
    if plan.already_suspended or plan.upload_from is None:
        return None
    assert plan.snapshot is not None and plan.atelet_address is not None
    show_step(f"detach: upload paused snapshot from full node {plan.upload_from.node}")
    try:
        done: AteletCheckpointResult = await atelet_step(
            Activity.ATELET_COPY_SNAPSHOT,
            AteletCopyInput(
                operation_id=operation_id,
                atelet_address=plan.atelet_address,
                source=plan.upload_from,
                destination=plan.snapshot,
            ),
            result_type=AteletCheckpointResult,
        )
    except ApplicationError as error:
        await drop_snapshot(actor, operation_id, plan.snapshot.snapshot_id, error.message)
        raise reraise(
            error,
            f"actor {actor.key}'s node {plan.upload_from.node} is full and its paused snapshot could not be "
            "moved off it; it stays PAUSED: ",
        ) from error
    show_step("detach: finalize")
    await settle_snapshot(Activity.COMPLETE_SUSPEND, actor, operation_id, plan.snapshot.snapshot_id, done)
    return plan.snapshot.generation
