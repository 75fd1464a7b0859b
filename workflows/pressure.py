"""ResumeActor's pressure step: when placement finds no room, move opted-in actors off their
workers instead of letting the request wait out its park budget (issue 27; ARCHITECTURE.md
"pressure suspend"; `store.pressure` chooses them: frozen first, then the longest idle).

Each move is the victim's own SuspendActor (or PauseActor, its template's choice), started as a
child workflow under the victim's workflow ID (its lock), with the reason `pressure: room for
<atespace>/<name>` in its history, giving way to a request in flight (`if_idle`); the child is
abandoned to finish on its own if this workflow ends first. A victim whose ID is held by another
operation, whose move gave way or failed, is passed over for the next; at most
`MAX_PRESSURE_MOVES` are tried.

Workflow code only: imports temporalio, the standard library and `domain`.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.steps import db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.idle import IdleAction
    from domain.operations.pause import PauseActorInput, PauseActorResult
    from domain.operations.pressure import (
        MAX_PRESSURE_MOVES,
        ROOM_SIGNAL,
        PressureInput,
        PressureVictimRef,
        PressureVictims,
        ReleaseRoomInput,
    )
    from domain.operations.suspend import SuspendActorInput, SuspendActorResult
    from domain.refs import ActorRef
    from domain.states import Operation
    from domain.temporal import WORKFLOW_TASK_TIMEOUT
    from workflows.search_attributes import operation_attributes

PRESSURE_PATCH = "pressure-suspends"
"""The `workflow.patched` ID of the pressure step; runs recorded before it answered NoCapacity at once."""

ROOM_QUEUE_PATCH = "room-queue"
"""The `workflow.patched` ID of the room queue: the resume joins it, a move may empty a worker for
an older waiting resume (which is told by signal), and a move that gave way or failed frees its
worker's reservation. Runs recorded before moved actors for themselves only."""


def pressure_reason(actor: ActorRef) -> str:
    """The reason a pressure move carries in the victim's history."""
    return f"pressure: room for {actor.key}"


async def make_room(actor: ActorRef, tried: list[ActorRef], operation_id: str = "") -> ActorRef | None:
    """Move one opted-in actor off its worker so that `actor` can be placed.

    In the room queue (ROOM_QUEUE_PATCH) the worker a move empties is kept for the oldest resume
    waiting for room that it would take: when that is another one, it is told (`ROOM_SIGNAL` to
    its run) and this resume tries the next actor, up to `MAX_PRESSURE_MOVES` in all.

    Args:
        actor: the actor whose resume found no room.
        tried: actors tried by earlier calls of this resume (extended here).
        operation_id: the resume's run (the room queue names it).

    Returns:
        The actor moved for `actor`, or None when none could be (none opted in or fit, each gave
        way to a request or failed, the workers emptied went to older waiters, or
        `MAX_PRESSURE_MOVES` were tried).
    """
    queue = bool(operation_id) and workflow.patched(ROOM_QUEUE_PATCH)
    while len(tried) < MAX_PRESSURE_MOVES:
        found: PressureVictims = await db_step(
            Activity.PRESSURE_VICTIMS,
            PressureInput(actor=actor, tried=list(tried), operation_id=operation_id if queue else ""),
            result_type=PressureVictims,
        )
        if not found.victims:
            return None
        victim = found.victims[0]
        tried.append(victim.actor)
        beneficiary = found.room_for or actor
        show_step(f"make room for {beneficiary.key}: {victim.action} {victim.actor.key} (pool {victim.pool})")
        if not await _move(beneficiary, victim):
            if queue:  # its worker stays taken: keep it for nobody
                await db_step(Activity.RELEASE_ROOM, ReleaseRoomInput(victims=[victim.actor]))
            continue
        if found.room_for is None:
            return victim.actor
        await _tell(found.room_for, found.room_for_operation)
    return None


async def _tell(waiter: ActorRef, operation_id: str) -> None:
    """Tell the waiting resume (run `operation_id` of `waiter`) that a worker was emptied for it;
    a run that has ended meanwhile is not told (its actor's next resume finds the worker kept)."""
    try:
        await workflow.get_external_workflow_handle(waiter.workflow_id, run_id=operation_id).signal(ROOM_SIGNAL)
    except FailureError:
        pass


async def _move(actor: ActorRef, victim: PressureVictimRef) -> bool:
    """Run the victim's move as a child workflow; True when it left its worker, counted by pool."""
    pause = victim.action == IdleAction.PAUSE.value
    operation = Operation.PAUSE if pause else Operation.SUSPEND
    argument: Any = (
        PauseActorInput(actor=victim.actor, reason=pressure_reason(actor), if_idle=True)
        if pause
        else SuspendActorInput(actor=victim.actor, reason=pressure_reason(actor), if_idle=True)
    )
    outcome = "ok"
    try:
        result = await workflow.execute_child_workflow(
            operation.value,
            argument,
            id=victim.actor.workflow_id,
            result_type=PauseActorResult if pause else SuspendActorResult,
            task_timeout=WORKFLOW_TASK_TIMEOUT,
            parent_close_policy=ParentClosePolicy.ABANDON,
            search_attributes=operation_attributes(victim.actor.atespace, victim.actor.name, operation.value),
        )
        if result.abandoned:
            outcome = "abandoned"
    except WorkflowAlreadyStartedError:
        outcome = "busy"  # another operation holds the victim
    except (ChildWorkflowError, ApplicationError):
        outcome = "failed"
    workflow.metric_meter().create_counter(
        "ate_pressure_suspends", "Actors ate moved off their worker to make room for a resume, by pool and outcome"
    ).add(1, {"pool": victim.pool, "action": victim.action, "outcome": outcome})
    return outcome == "ok"
