"""Starting operation workflows with the per-actor workflow-ID lock.

`actor/<atespace>/<name>` admits one running workflow. A request of the same kind attaches to
the running one and gets its result (a hundred concurrent resumes cause one restore); a request
of another kind fails fast with `another operation is in progress for this actor`, naming the
running operation. Workflow failures come back as the store/atelet reason they carry.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from api.errors import ApiError, OperationInProgress, Timeout
from domain.reasons import Reason
from domain.states import Operation
from domain.temporal import TASK_QUEUE, WORKFLOW_TASK_TIMEOUT, search_attribute_values

ResultT = TypeVar("ResultT")

CLOSING_GRACE_SECONDS = 10.0
"""How long a request waits for another kind of operation's workflow to close when Postgres
already shows no operation in flight on the actor (see `start_or_attach`). A resume and a sync
suspend answer at their last commit, before their workflow closes; when the worker dies right
then, the closing waits for the sticky queue's failover (WORKFLOW_TASK_TIMEOUT, 3 s) and a
worker to take it: 3 s was too short for a worker's restart (tests/durability/test_node_loss.py
met a 409 there)."""

# Workflow failure types that are a user-facing reason of their own; anything else is Internal.
_REASONS = frozenset({
    Reason.NOT_FOUND, Reason.FAILED_PRECONDITION, Reason.NO_CAPACITY, Reason.NO_MATCHING_WORKER, Reason.INVALID_ARGUMENT,
    Reason.ALREADY_EXISTS, Reason.UNREACHABLE,
})  # fmt: skip
DAMAGED = Reason.ATELET_DATA_LOSS
"""The failure type of an operation an atelet refused because a snapshot's files do not match its
manifest (gRPC DATA_LOSS): final (the same snapshot would be refused again), answered as
`SnapshotDamaged` with what the user can do."""
DAMAGED_ADVICE = (
    "; the actor keeps that snapshot and stays as it was: put the damaged file back from a copy (the snapshot's "
    "manifest.json has each file's SHA-256), start a new actor from an earlier tagged snapshot "
    "('ate create actor NEW --from-tag ATESPACE/TAG'), or delete the actor"
)


def search_attributes(atespace: str, name: str, operation: str) -> TypedSearchAttributes:
    """`AteAtespace`, `AteActor` and `AteOperation` for a workflow on (atespace, name) of type
    `operation` (an `Operation`, or another workflow type such as ExecInActor)."""
    values = search_attribute_values(atespace, name, str(operation))
    return TypedSearchAttributes([SearchAttributePair(SearchAttributeKey.for_keyword(k), v) for k, v in values.items()])


async def _start_or_running(
    client: Client,
    operation: Operation,
    argument: Any,
    *,
    workflow_id: str,
    atespace: str,
    name: str,
    result_type: type[ResultT],
) -> tuple[WorkflowHandle[Any, ResultT], str | None]:
    """Start `operation` under `workflow_id`; when the ID is taken, the running workflow's
    handle and type instead (None as type when this call started it)."""
    try:
        started = await client.start_workflow(
            operation.value,
            argument,
            id=workflow_id,
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            task_timeout=WORKFLOW_TASK_TIMEOUT,
            search_attributes=search_attributes(atespace, name, operation),
            result_type=result_type,
            execution_timeout=timedelta(minutes=30),
        )
        return started, None
    except WorkflowAlreadyStartedError as error:
        handle = client.get_workflow_handle(workflow_id, run_id=error.run_id, result_type=result_type)
        return handle, (await handle.describe()).workflow_type


async def start_or_attach(
    client: Client,
    operation: Operation,
    argument: Any,
    *,
    workflow_id: str,
    atespace: str,
    name: str,
    result_type: type[ResultT],
    subject: str,
    closing_grace_seconds: float = 0.0,
) -> WorkflowHandle[Any, ResultT]:
    """Start `operation` under `workflow_id`, or attach to a running workflow of the same kind.

    Args:
        closing_grace_seconds: when a workflow of another kind holds the ID, wait this long for
            it to close before refusing. Callers pass a few seconds when Postgres shows no
            operation in flight on the actor: the holder has then done its work and is only
            closing (a resume answers "already RUNNING" as soon as its last step committed, so
            a suspend sent right after would otherwise meet the resume's closing workflow).

    Raises:
        OperationInProgress: a workflow of another kind holds the ID (after the grace).
    """
    handle, running = await _start_or_running(
        client, operation, argument, workflow_id=workflow_id, atespace=atespace, name=name, result_type=result_type
    )
    if running is None or running == operation.value:
        return handle
    if closing_grace_seconds > 0 and await _closed_within(client, workflow_id, handle.run_id, closing_grace_seconds):
        return await start_or_attach(
            client, operation, argument, workflow_id=workflow_id, atespace=atespace, name=name,
            result_type=result_type, subject=subject,
        )  # fmt: skip
    raise OperationInProgress(
        "another operation is in progress for this actor",
        {"operation": running, "actor": subject, "workflow_id": workflow_id},
    )


async def _closed_within(client: Client, workflow_id: str, run_id: str | None, seconds: float) -> bool:
    """Whether the workflow run closes (in any way) within `seconds`."""
    try:
        await asyncio.wait_for(client.get_workflow_handle(workflow_id, run_id=run_id).result(), seconds)
    except TimeoutError:
        return False
    except Exception:
        pass
    return True


async def take_over(
    client: Client,
    operation: Operation,
    argument: Any,
    *,
    workflow_id: str,
    atespace: str,
    name: str,
    result_type: type[ResultT],
    reason: str,
) -> WorkflowHandle[Any, ResultT]:
    """Start `operation`, first terminating any running workflow of another kind under the ID.

    RevertActor and forced deletes use this: a resume stuck on a dead node must not block the
    way out (the reference system answered "another operation is in progress" instead).
    A running workflow of the same kind is attached to.
    """
    for _ in range(3):
        handle, running = await _start_or_running(
            client, operation, argument, workflow_id=workflow_id, atespace=atespace, name=name, result_type=result_type
        )
        if running is None or running == operation.value:
            return handle
        try:
            await handle.terminate(reason=reason)
        except RPCError:
            pass  # it finished meanwhile; start again
    raise OperationInProgress(
        "another operation is in progress for this actor and could not be stopped; try again",
        {"workflow_id": workflow_id},
    )


async def wait_result(
    handle: WorkflowHandle[Any, ResultT], timeout: float, subject: str, what: str, advice: str = ""
) -> ResultT:
    """Wait for a workflow's result, mapping its failure to the reason it carries.

    Raises:
        Timeout: not done within `timeout` seconds (the workflow keeps running); the message
            ends with `advice` (how to follow it, what to do if it stays stuck).
        ApiError: the workflow failed; reason NotFound, FailedPrecondition, NoCapacity... or Internal.
    """
    try:
        return await asyncio.wait_for(handle.result(), timeout)
    except TimeoutError as error:
        raise Timeout(
            f"{what} of {subject} did not finish within {round(timeout, 1):g} s; it continues in the background{advice}",
            {"workflow_id": handle.id},
        ) from error
    except WorkflowFailureError as error:
        cause = error.cause
        if isinstance(cause, ApplicationError):
            details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
            if cause.type == DAMAGED:
                raise ApiError(cause.message + DAMAGED_ADVICE, details, reason=Reason.SNAPSHOT_DAMAGED) from error
            reason = Reason(cause.type) if cause.type in _REASONS else Reason.INTERNAL
            raise ApiError(cause.message, details, reason=reason) from error
        raise ApiError(f"{what} of {subject} failed: {cause or error}", reason=Reason.INTERNAL) from error
