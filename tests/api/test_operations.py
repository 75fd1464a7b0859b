"""The per-actor workflow-ID lock of `api.operations` on a real Temporal dev server.

ARCHITECTURE.md: a request of the same kind attaches to the running workflow; a request of a
different kind fails fast with `another operation is in progress for this actor`. One refinement,
checked here: when Postgres already shows no operation in flight (the holder is only closing,
as a resume is once its last step committed), the request waits a short grace for it to close
and then starts, instead of failing. The workflows under the lock here are stand-ins with the
product's type names that sleep for a set time, on a worker of this test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from api.errors import ApiError, OperationInProgress, Timeout
from api.operations import start_or_attach, wait_result
from api.routes.actors import timeout_advice
from domain.refs import ActorRef
from domain.states import Operation
from domain.temporal import TASK_QUEUE


@workflow.defn(name=Operation.RESUME.value, sandboxed=False)
class SleepingResume:
    """Stands in for ResumeActor: holds the actor's workflow ID for `seconds`."""

    @workflow.run
    async def run(self, seconds: float) -> None:
        await workflow.sleep(timedelta(seconds=seconds))


@workflow.defn(name=Operation.SUSPEND.value, sandboxed=False)
class QuickSuspend:
    """Stands in for SuspendActor: returns at once."""

    @workflow.run
    async def run(self, _argument: object) -> str:
        return "suspended"


@workflow.defn(name="FailingOperation", sandboxed=False)
class FailingOperation:
    """Fails the way a rolled-back operation does, with the failure type it is given."""

    @workflow.run
    async def run(self, failure_type: str) -> None:
        raise ApplicationError(f"it failed as {failure_type}", type=failure_type, non_retryable=True)


@pytest.fixture
async def client(temporal_address: str) -> AsyncIterator[Client]:
    connected = await Client.connect(temporal_address)
    async with Worker(connected, task_queue=TASK_QUEUE, workflows=[SleepingResume, QuickSuspend, FailingOperation]):
        yield connected


async def hold_with_resume(client: Client, workflow_id: str, seconds: float) -> None:
    await client.start_workflow(
        Operation.RESUME.value, seconds, id=workflow_id, task_queue=TASK_QUEUE, task_timeout=timedelta(seconds=3)
    )


async def suspend(client: Client, workflow_id: str, grace: float) -> str:
    handle = await start_or_attach(
        client, Operation.SUSPEND, None, workflow_id=workflow_id, atespace="t", name="a1",
        result_type=str, subject="actor t/a1", closing_grace_seconds=grace,
    )  # fmt: skip
    return await handle.result()


async def test_a_different_operation_fails_fast_without_grace(client: Client) -> None:
    workflow_id = f"actor/t/{uuid.uuid4().hex[:8]}"
    await hold_with_resume(client, workflow_id, 30.0)
    with pytest.raises(OperationInProgress) as refused:
        await suspend(client, workflow_id, grace=0.0)
    assert refused.value.message == "another operation is in progress for this actor"
    assert refused.value.details["operation"] == "ResumeActor"
    await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_a_closing_operation_is_waited_for_within_the_grace(client: Client) -> None:
    workflow_id = f"actor/t/{uuid.uuid4().hex[:8]}"
    await hold_with_resume(client, workflow_id, 1.0)  # closes in about a second
    assert await suspend(client, workflow_id, grace=10.0) == "suspended"
    described = await client.get_workflow_handle(workflow_id).describe()
    assert described.workflow_type == "SuspendActor"


async def test_an_operation_still_running_after_the_grace_is_refused(client: Client) -> None:
    workflow_id = f"actor/t/{uuid.uuid4().hex[:8]}"
    await hold_with_resume(client, workflow_id, 30.0)
    with pytest.raises(OperationInProgress):
        await asyncio.wait_for(suspend(client, workflow_id, grace=0.5), 20)
    await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_a_resume_that_outlives_the_request_says_how_to_follow_it_and_get_out(client: Client) -> None:
    workflow_id = f"actor/t/{uuid.uuid4().hex[:8]}"
    await hold_with_resume(client, workflow_id, 30.0)
    handle = client.get_workflow_handle(workflow_id)
    with pytest.raises(Timeout) as late:
        await wait_result(handle, 0.5, "actor t/a1", "resume", timeout_advice(ActorRef("t", "a1"), Operation.RESUME))
    assert late.value.message == (
        "resume of actor t/a1 did not finish within 0.5 s; it continues in the background; follow it with "
        "`ate get operations -a t --actor a1`; if it stays stuck, `ate revert actor a1 -a t` brings the actor "
        "back to its last snapshot"
    )
    assert late.value.details == {"workflow_id": workflow_id}
    await handle.terminate("test done")


@pytest.mark.parametrize(
    ("failure_type", "reason", "advice"),
    [
        # a snapshot whose files do not match its manifest (the atelet's DATA_LOSS): final, with a way out
        ("AteletDataLoss", "SnapshotDamaged", True),
        ("NoCapacity", "NoCapacity", False),
        # any other atelet refusal may clear (a runtime just upgraded, a worker briefly busy): retried
        ("AteletFailedPrecondition", "Internal", False),
        ("SomethingNew", "Internal", False),
    ],
)
async def test_a_failed_workflow_is_answered_with_the_reason_of_its_failure_type(
    client: Client, failure_type: str, reason: str, advice: bool
) -> None:
    handle = await client.start_workflow(
        "FailingOperation", failure_type, id=f"fail-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE
    )
    with pytest.raises(ApiError) as failed:
        await wait_result(handle, 30, "actor t/a1", "operation")
    assert failed.value.reason == reason
    assert failed.value.message == f"it failed as {failure_type}" + (
        "; the actor keeps that snapshot and stays as it was: put the damaged file back from a copy (the "
        "snapshot's manifest.json has each file's SHA-256), start a new actor from an earlier tagged snapshot "
        "('ate create actor NEW --from-tag ATESPACE/TAG'), or delete the actor" if advice else ""
    )
