"""Automatic recovery: a CRASHED actor whose template says `onCrash: Revert` is reverted to its
last COMPLETED snapshot by a RevertActor workflow, which the api-server starts by itself; the
actor then resumes at its next request.

A sweep every `every_seconds` lists such actors (`Store.liveness.crashed_to_recover`) and starts
RevertActor under each one's workflow ID, carrying the crash's reason (recorded with the revert
in the actor's history, `ate describe actor`), and counts it in `ate_actor_recoveries_total`.
An actor reverted MAX_RECOVERIES_PER_WINDOW times within RECOVERY_WINDOW_SECONDS (3 in 10
minutes) that crashed again is left CRASHED, its last error saying so
(`ate_actor_recoveries_total{action="stopped"}`).
Durable and idempotent without a record of its own: what needs recovery is the actor's state in
PostgreSQL, a started workflow runs to its end whatever happens to this process, and the
workflow-ID lock admits one operation per actor (an actor whose ID is held, by a revert already
under way or any other operation, is looked at again at the next sweep). Whatever made the
actor CRASHED (its sandbox exited, its node did not return within the grace, its worker pod was
deleted, an eviction deadline) is covered alike.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from api.metrics import RECOVERIES
from api.operations import search_attributes
from domain.operations.revert import RevertActorInput, RevertActorResult
from domain.states import Operation
from domain.templates import CrashAction
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT
from store.interfaces import RecoveryStore

log = logging.getLogger("ate.api.recovery")

RECOVERY_CHECK_SECONDS = 1.0
"""How often the api-server looks for CRASHED actors to recover, in seconds."""


async def recover_crashed(store: RecoveryStore, temporal: Client, limit: int = 100) -> int:
    """Start RevertActor for each CRASHED actor whose template says `onCrash: Revert`.

    Returns:
        How many reverts this call started (an actor whose workflow ID is held is skipped).
    """
    started = 0
    for ref in await store.liveness.stop_crash_loops():
        RECOVERIES.labels("stopped").inc()
        log.warning("actor %s keeps crashing after its automatic reverts: it stays CRASHED", ref.key)
    for crashed in await store.liveness.crashed_to_recover(limit):
        ref = crashed.actor
        try:
            await temporal.start_workflow(
                Operation.REVERT.value,
                RevertActorInput(actor=ref, recovery_of=crashed.last_error or "no reason recorded"),
                id=ref.workflow_id,
                task_queue=TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                task_timeout=WORKFLOW_TASK_TIMEOUT,
                search_attributes=search_attributes(ref.atespace, ref.name, Operation.REVERT),
                result_type=RevertActorResult,
                execution_timeout=timedelta(minutes=30),
            )
        except WorkflowAlreadyStartedError:
            continue
        started += 1
        RECOVERIES.labels(CrashAction.REVERT.value).inc()
        log.warning(
            "actor %s is CRASHED (%s): reverting it to its last completed snapshot (its template says onCrash: Revert)",
            ref.key, crashed.last_error,
        )  # fmt: skip
    return started


async def run_recovery(store: RecoveryStore, temporal: Client, every_seconds: float = RECOVERY_CHECK_SECONDS) -> None:
    """`recover_crashed` every `every_seconds` until cancelled; a failed sweep is logged and retried."""
    while True:
        try:
            await recover_crashed(store, temporal)
        except Exception:
            log.exception("automatic recovery sweep failed; trying again")
        await asyncio.sleep(every_seconds)
