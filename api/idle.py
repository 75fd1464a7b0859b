"""The idle judge: actors leave their worker (and go down a tier) by themselves when their idle
policy says so (issue 27; ARCHITECTURE.md "Actors on their own"; `domain.idle`).

Every `every_seconds` the api-server reads the actors whose policy's first step is due
(`Store.idleness.candidates`: RUNNING, FROZEN or PAUSED, no operation in flight, idle since the
last traffic any router replica reported or since their last resume), picks each one's next step
(`IdlePolicy.next_step_in`: a RUNNING actor its first, a FROZEN one the first after Freeze, a PAUSED
one its Suspend) and, when the actor has been idle that long, starts the step's workflow under the
actor's workflow ID with the reason `idle for N s`: FreezeActor, PauseActor or SuspendActor. A
step gives way to traffic (`if_idle`): a router replica with a request in flight (or parked) for
the actor makes it abandon, and the actor's idle time starts again.

Durable and idempotent without a record of its own, like the automatic recovery: what is due is
in PostgreSQL, a started workflow runs to its end whatever happens to this process, and the
workflow-ID lock admits one operation per actor (an actor whose ID is held is looked at again at
the next round). Several api-servers may judge at once. An action that failed is not tried again
for that actor before a backoff (1 s doubling to `MAX_RETRY_SECONDS`), so a broken node is not
asked every second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from api.metrics import IDLE_ACTIONS
from api.operations import search_attributes
from domain.idle import IDLE_CHECK_SECONDS, IdleAction, IdleStep, idle_reason
from domain.operations.freeze import FreezeActorInput, FreezeActorResult
from domain.operations.pause import PauseActorInput, PauseActorResult
from domain.operations.suspend import SuspendActorInput, SuspendActorResult
from domain.refs import ActorRef
from domain.states import Operation
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT
from store.idleness import IdleActor
from store.interfaces import IdleStore

log = logging.getLogger("ate.api.idle")

MAX_RETRY_SECONDS = 60.0
"""The longest wait before an idle action that failed is tried again for the same actor."""


_WORKFLOWS: dict[IdleAction, tuple[Operation, type[Any]]] = {
    IdleAction.FREEZE: (Operation.FREEZE, FreezeActorResult),
    IdleAction.PAUSE: (Operation.PAUSE, PauseActorResult),
    IdleAction.SUSPEND: (Operation.SUSPEND, SuspendActorResult),
}


def due_step(actor: IdleActor) -> IdleStep | None:
    """The step of `actor`'s policy due now: the next one beyond its resting state, when it has
    been idle at least that step's `after_seconds`; None otherwise."""
    step = actor.policy.next_step_in(actor.state)
    if step is None or actor.idle_seconds < step.after_seconds:
        return None
    return step


def workflow_input(actor: IdleActor, step: IdleStep) -> Any:
    """The workflow input of `step` for `actor`, carrying the reason; it gives way to traffic
    (`if_idle`) whatever the state read: a request may have thawed a FROZEN actor since."""
    reason = idle_reason(actor.idle_seconds)
    if_idle = True  # the state read may be stale (a request may have thawed it since): always give way
    if step.action is IdleAction.FREEZE:
        return FreezeActorInput(actor=actor.actor, reason=reason, if_idle=if_idle)
    if step.action is IdleAction.PAUSE:
        return PauseActorInput(actor=actor.actor, reason=reason, if_idle=if_idle)
    return SuspendActorInput(actor=actor.actor, reason=reason, if_idle=if_idle)


@dataclass
class IdleJudge:
    """Starts the idle policies' steps that are due (module doc).

    Args:
        store: the store (`idleness.candidates`).
        temporal: the Temporal client the workflows are started with.
        every_seconds: seconds between two rounds.
    """

    store: IdleStore
    temporal: Client
    every_seconds: float = IDLE_CHECK_SECONDS
    _retry_at: dict[ActorRef, tuple[float, float]] = field(default_factory=dict)
    _running: set[asyncio.Task[None]] = field(default_factory=set)

    async def judge(self, limit: int = 1000) -> list[tuple[ActorRef, IdleAction]]:
        """One round: start every due step (each once per actor; an actor whose ID is held, or
        whose last action failed within its backoff, waits for a later round).

        Returns:
            The (actor, action) pairs started in this round.
        """
        now = time.monotonic()
        started: list[tuple[ActorRef, IdleAction]] = []
        for actor in await self.store.idleness.candidates(limit):
            step = due_step(actor)
            if step is None or self._retry_at.get(actor.actor, (0.0, 0.0))[0] > now:
                continue
            operation, result_type = _WORKFLOWS[step.action]
            ref = actor.actor
            try:
                handle = await self.temporal.start_workflow(
                    operation.value,
                    workflow_input(actor, step),
                    id=ref.workflow_id,
                    task_queue=TASK_QUEUE,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    task_timeout=WORKFLOW_TASK_TIMEOUT,
                    search_attributes=search_attributes(ref.atespace, ref.name, operation),
                    result_type=result_type,
                    execution_timeout=timedelta(minutes=30),
                )
            except WorkflowAlreadyStartedError:
                continue  # another operation holds the actor: looked at again next round
            started.append((ref, step.action))
            log.info("actor %s: %s (%s)", ref.key, operation.value, idle_reason(actor.idle_seconds))
            task = asyncio.create_task(self._follow(ref, step.action, handle.result()))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return started

    async def _follow(self, ref: ActorRef, action: IdleAction, result: Any) -> None:
        """Count the action's outcome; a failure delays the next try for this actor (backoff)."""
        try:
            done = await result
        except Exception as error:
            _, last = self._retry_at.get(ref, (0.0, 0.5))
            backoff = min(MAX_RETRY_SECONDS, last * 2)
            self._retry_at[ref] = (time.monotonic() + backoff, backoff)
            IDLE_ACTIONS.labels(action.value, "failed").inc()
            log.warning("actor %s: idle %s failed (%s); trying again in %.0f s at the earliest", ref.key, action.value,
                        error, backoff)  # fmt: skip
            return
        self._retry_at.pop(ref, None)
        IDLE_ACTIONS.labels(action.value, "abandoned" if getattr(done, "abandoned", False) else "ok").inc()

    async def run(self) -> None:
        """`judge` every `every_seconds` until cancelled; a failed round is logged and retried."""
        try:
            while True:
                try:
                    await self.judge()
                except Exception:
                    log.exception("idle judge round failed; trying again")
                await asyncio.sleep(self.every_seconds)
        finally:
            for task in list(self._running):
                task.cancel()
