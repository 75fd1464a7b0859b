"""SuspendActor (workflows/suspend_actor.py): sync and async suspends from RUNNING, the upload of a
paused actor's snapshot, the rollback of a failed checkpoint or upload, refusals, retries, and
an already SUSPENDED actor."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import grpc
import pytest

from domain.operations.atelet_calls import AteletCheckpointInput, AteletCheckpointResult, AteletCopyInput
from domain.operations.router_drain import RouterDrainInput
from domain.operations.suspend import (
    BeginSuspendInput,
    CompleteSnapshotInput,
    SuspendActorInput,
    SuspendCompletedInput,
    SuspendPlan,
)
from domain.operations.upload import CompleteUploadInput, UploadInput, UploadPlan, UploadSnapshotInput
from domain.states import TRANSITIONS, Operation
from domain.temporal import upload_workflow_id
from store import NotFound, StoreError
from store.errors import refused
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import ATELET, C1, DRAINED, MANIFEST, snapshot, worker
from workflows.suspend_actor import SuspendActorWorkflow
from workflows.upload_snapshot import UploadSnapshotWorkflow

RUN = SuspendActorWorkflow.run
ID = C1.workflow_id
RESERVED = snapshot(4)
PLAN = SuspendPlan(already_suspended=False, worker=worker(1), snapshot=RESERVED)
CHECKPOINTED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=8192, timings={"checkpoint": 0.4})
LOCAL = snapshot(4, local=True)
PAUSED_SNAPSHOT = snapshot(4, local=True, manifest=MANIFEST)
FROM_PAUSED = SuspendPlan(
    already_suspended=False,
    snapshot=RESERVED,
    upload_from=PAUSED_SNAPSHOT,
    atelet_address=ATELET,
)


def script_happy(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", PLAN).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", CHECKPOINTED
    ).script("complete_suspend", None)


async def test_a_sync_suspend_checkpoints_to_the_storage_location_and_finalizes(ate: Ate) -> None:
    script_happy(ate)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", "atelet_checkpoint", "complete_suspend"]
    assert ate.fakes.inputs("begin_suspend") == [BeginSuspendInput(actor=C1, operation_id=op, mode="sync")]
    assert ate.fakes.inputs("drain_routers") == [RouterDrainInput(actor=C1, operation_id=op)]
    assert ate.fakes.inputs("atelet_checkpoint") == [
        AteletCheckpointInput(operation_id=op, worker=worker(1), holder=C1, snapshot=RESERVED, complete_suspend=True)
    ]
    # CHECKPOINTED has no completed_at (the activity could not commit): the workflow's step does.
    assert ate.fakes.inputs("complete_suspend") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=op, snapshot_id=RESERVED.snapshot_id, manifest=MANIFEST, size_bytes=8192
        )
    ]
    assert result.actor == C1 and result.generation == 4 and not result.already_suspended
    assert result.upload_workflow_id is None
    assert result.timings["atelet_checkpoint"] == 0.4
    assert result.timings["drain"] == DRAINED.waited_seconds  # how long the step waited for the replicas


async def test_a_checkpoint_that_completed_the_suspend_itself_needs_no_finalize_step(ate: Ate) -> None:
    script_happy(ate)
    completed = replace(CHECKPOINTED, timings={**CHECKPOINTED.timings, "finalize": 0.003}, completed_at=1.8e9)
    ate.fakes.script("atelet_checkpoint", completed)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", "atelet_checkpoint"]
    assert result.generation == 4 and result.timings["atelet_finalize"] == 0.003 and "finalize" not in result.timings


async def test_a_checkpoint_that_completed_and_then_failed_is_not_rolled_back(ate: Ate) -> None:
    # An attempt committed SUSPENDED, its answer was lost, and the retries failed.
    script_happy(ate)
    ate.fakes.script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "Checkpoint")
    )
    ate.fakes.script("suspend_completed", True)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", *["atelet_checkpoint"] * 4, "suspend_completed"]
    assert ate.fakes.inputs("suspend_completed") == [SuspendCompletedInput(actor=C1, snapshot_id=RESERVED.snapshot_id)]
    assert result.generation == 4 and not result.already_suspended


async def test_a_retry_that_finds_the_suspend_completed_earlier_needs_no_finalize_step(ate: Ate) -> None:
    script_happy(ate)
    ate.fakes.script("atelet_checkpoint", AteletCheckpointResult(manifest={}, size_bytes=0, completed_earlier=True))
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", "atelet_checkpoint"]
    assert result.generation == 4


async def test_a_drain_that_fails_for_good_rolls_back_before_any_checkpoint(ate: Ate) -> None:
    down = StoreError("the database is down")
    ate.fakes.script("begin_suspend", PLAN).script("drain_routers", store_failure(down))
    ate.fakes.script("rollback_suspend", None)
    failure = await ate.failure(RUN, SuspendActorInput(actor=C1), id=ID)
    assert failure.message == "suspend of actor demo/c1 failed; it keeps running: the database is down"
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", "rollback_suspend"]


async def test_a_suspended_actor_returns_at_once(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=True))
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_suspend"]
    assert result.already_suspended and result.generation is None


async def test_an_unknown_actor_is_refused(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", store_failure(NotFound("actor demo/c1 not found")))
    failure = await ate.failure(RUN, SuspendActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("NotFound", "actor demo/c1 not found")
    assert ate.fakes.names() == ["begin_suspend"]


async def test_a_state_that_allows_no_suspend_is_refused_naming_both_states(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", store_failure(refused(TRANSITIONS[Operation.SUSPEND], C1.key, "RESUMING")))
    failure = await ate.failure(RUN, SuspendActorInput(actor=C1), id=ID)
    assert failure.type == "FailedPrecondition"
    assert (
        failure.message
        == "actor demo/c1 cannot be suspended from state RESUMING (SuspendActor wants RUNNING, FROZEN or PAUSED)"
    )
    assert ate.fakes.names() == ["begin_suspend"]


async def test_a_failed_checkpoint_drops_the_snapshot_and_the_actor_keeps_running(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", PLAN).script("rollback_suspend", None).script("suspend_completed", False)
    refusal = "cannot checkpoint: the sandbox has an open TCP connection"
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, refusal, "Checkpoint")
    )
    failure = await ate.failure(RUN, SuspendActorInput(actor=C1), id=ID)
    cause = f"while calling atelet Checkpoint on 127.0.0.1:8085: {refusal}"
    assert failure.type == "AteletFailedPrecondition"
    assert failure.message == f"suspend of actor demo/c1 failed; it keeps running: {cause}"
    names = ["begin_suspend", "drain_routers", "atelet_checkpoint", "suspend_completed", "rollback_suspend"]
    assert ate.fakes.names() == names
    assert ate.fakes.inputs("rollback_suspend") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=ate.run_id, snapshot_id=RESERVED.snapshot_id, manifest={"error": cause}, size_bytes=0
        )
    ]


async def test_a_checkpoint_that_fails_once_is_retried_and_the_suspend_succeeds(ate: Ate) -> None:
    script_happy(ate)
    unavailable = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "Checkpoint")
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", unavailable, CHECKPOINTED)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    assert [c.attempt for c in ate.fakes.calls if c.name == "atelet_checkpoint"] == [1, 2]
    assert ate.fakes.names() == [
        "begin_suspend",
        "drain_routers",
        "atelet_checkpoint",
        "atelet_checkpoint",
        "complete_suspend",
    ]
    assert result.generation == 4


async def test_a_paused_actor_is_suspended_by_uploading_its_local_snapshot(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", FROM_PAUSED).script("complete_suspend", None)
    ate.fakes.script("atelet_copy_snapshot", CHECKPOINTED)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_suspend", "atelet_copy_snapshot", "complete_suspend"]
    assert ate.fakes.inputs("atelet_copy_snapshot") == [
        AteletCopyInput(operation_id=op, atelet_address=ATELET, source=PAUSED_SNAPSHOT, destination=RESERVED)
    ]
    assert result.generation == 4 and result.upload_workflow_id is None


async def test_a_failed_upload_of_a_paused_actor_keeps_it_paused(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", FROM_PAUSED).script("rollback_suspend", None)
    corrupt = "local snapshot does not match its manifest"
    ate.fakes.script(
        "atelet_copy_snapshot", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, corrupt, "CopySnapshot")
    )
    failure = await ate.failure(RUN, SuspendActorInput(actor=C1), id=ID)
    assert (
        failure.message
        == f"suspend of actor demo/c1 failed; it stays PAUSED: while calling atelet CopySnapshot on 127.0.0.1:8085: {corrupt}"
    )
    assert ate.fakes.names() == ["begin_suspend", "atelet_copy_snapshot", "rollback_suspend"]


ASYNC_PLAN = SuspendPlan(already_suspended=False, worker=worker(1), snapshot=LOCAL)
UPLOAD_PLAN = UploadPlan(
    needed=True, source=snapshot(4, local=True, manifest=MANIFEST), destination=snapshot(4), atelet_address=ATELET
)


@pytest.mark.private_test_server  # its UploadSnapshot child outlives it
async def test_an_async_suspend_keeps_the_checkpoint_on_the_node_and_uploads_it_in_the_background(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", ASYNC_PLAN).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", CHECKPOINTED
    ).script("complete_suspend", None)
    ate.fakes.script("begin_upload", UPLOAD_PLAN).script("atelet_copy_snapshot", CHECKPOINTED)
    ate.fakes.script("complete_upload", True)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1, mode="async"), id=ID)
    op = ate.run_id
    upload_id = upload_workflow_id("demo", "c1", LOCAL.snapshot_id)
    assert result.upload_workflow_id == upload_id and result.generation == 4
    assert ate.fakes.inputs("begin_suspend") == [BeginSuspendInput(actor=C1, operation_id=op, mode="async")]
    assert ate.fakes.inputs("atelet_checkpoint")[0].snapshot == LOCAL
    # The UploadSnapshot child outlives the suspend (parent close policy ABANDON): wait for it.
    upload = ate.client.get_workflow_handle_for(UploadSnapshotWorkflow.run, upload_id)
    uploaded = await upload.result()
    upload_op = (await upload.describe()).run_id
    assert uploaded.generation == 4 and uploaded.skipped is None
    assert ate.fakes.names() == [
        "begin_suspend",
        "drain_routers",
        "atelet_checkpoint",
        "complete_suspend",
        "begin_upload",
        "atelet_copy_snapshot",
        "complete_upload",
    ]
    assert ate.fakes.inputs("begin_upload") == [
        UploadInput(actor=C1, operation_id=upload_op, local_snapshot_id=LOCAL.snapshot_id)
    ]
    assert ate.fakes.inputs("complete_upload") == [
        CompleteUploadInput(
            actor=C1,
            operation_id=upload_op,
            local_snapshot_id=LOCAL.snapshot_id,
            snapshot_id=snapshot(4).snapshot_id,
            manifest=MANIFEST,
            size_bytes=8192,
        )
    ]


async def test_an_async_suspend_whose_upload_already_runs_attaches_to_it(ate: Ate) -> None:
    """The upload's workflow ID is per local snapshot: a second start finds the first running."""
    release = asyncio.Event()

    async def held_reservation(_request: UploadInput) -> UploadPlan:
        await release.wait()
        return UploadPlan(needed=False)

    upload_id = upload_workflow_id("demo", "c1", LOCAL.snapshot_id)
    ate.fakes.script("begin_upload", held_reservation).script("abandon_upload", None)
    first = await ate.start(
        UploadSnapshotWorkflow.run, UploadSnapshotInput(actor=C1, local_snapshot_id=LOCAL.snapshot_id), id=upload_id
    )
    await ate.fakes.wait_for("begin_upload")
    ate.fakes.script("begin_suspend", ASYNC_PLAN).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", CHECKPOINTED
    ).script("complete_suspend", None)
    result = await ate.execute(RUN, SuspendActorInput(actor=C1, mode="async"), id=ID)
    assert result.upload_workflow_id == upload_id
    release.set()
    assert (await first.result()).skipped == "the local snapshot was resumed or dropped"
    assert ate.fakes.names().count("begin_upload") == 1  # no second upload was started
