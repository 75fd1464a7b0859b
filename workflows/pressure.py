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
from temporalio.exceptions import ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.steps import db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.idle import IdleAction
    from domain.operations.pause import PauseActorInput, PauseActorResult
    from domain.operations.pressure import MAX_PRESSURE_MOVES, PressureInput, PressureVictimRef, PressureVictims
    from domain.operations.suspend import SuspendActorInput, SuspendActorResult
    from domain.refs import ActorRef
    from domain.states import Operation
    from domain.temporal import WORKFLOW_TASK_TIMEOUT
    from workflows.search_attributes import operation_attributes

PRESSURE_PATCH = "pressure-suspends"
"""The `workflow.patched` ID of the pressure step; runs recorded before it answered NoCapacity at once."""


def pressure_reason(actor: ActorRef) -> str:
    """The reason a pressure move carries in the victim's history."""
    return f"pressure: room for {actor.key}"


async def make_room(actor: ActorRef, tried: list[ActorRef]) -> ActorRef | None:
    """Move one opted-in actor off its worker so that `actor` can be placed.

    Args:
        actor: the actor whose resume found no room.
        tried: actors tried by earlier calls of this resume (extended here).

    Returns:
        The actor moved, or None when none could be (none opted in or fit, each gave way to a
        request or failed, or `MAX_PRESSURE_MOVES` were tried).
    """
    while len(tried) < MAX_PRESSURE_MOVES:
        found: PressureVictims = await db_step(
            Activity.PRESSURE_VICTIMS, PressureInput(actor=actor, tried=list(tried)), result_type=PressureVictims
        )
        if not found.victims:
            return None
        victim = found.victims[0]
        tried.append(victim.actor)
        show_step(f"make room: {victim.action} {victim.actor.key} (pool {victim.pool})")
        if await _move(actor, victim):
            return victim.actor
    return None


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
