"""PauseActor (workflows/pause_actor.py): a local checkpoint on the actor's node, its rollback,
refusals, a retried checkpoint, and an already PAUSED actor."""

from __future__ import annotations

import grpc

from domain.operations.atelet_calls import AteletCheckpointInput, AteletCheckpointResult
from domain.operations.pause import PauseActorInput, PausePlan
from domain.operations.suspend import BeginSuspendInput, CompleteSnapshotInput
from domain.states import TRANSITIONS, Operation
from store import NotFound
from store.errors import refused
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import C1, DRAINED, MANIFEST, NODE, snapshot, worker
from workflows.pause_actor import PauseActorWorkflow

RUN = PauseActorWorkflow.run
ID = C1.workflow_id
LOCAL = snapshot(5, local=True)
PLAN = PausePlan(already_paused=False, worker=worker(1), snapshot=LOCAL)
CHECKPOINTED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=2048, timings={"checkpoint": 0.2})


async def test_a_pause_checkpoints_onto_the_node_and_finalizes(ate: Ate) -> None:
    ate.fakes.script("begin_pause", PLAN).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", CHECKPOINTED
    ).script("complete_pause", None)
    result = await ate.execute(RUN, PauseActorInput(actor=C1), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_pause", "drain_routers", "atelet_checkpoint", "complete_pause"]
    assert ate.fakes.inputs("begin_pause") == [BeginSuspendInput(actor=C1, operation_id=op)]
    assert ate.fakes.inputs("atelet_checkpoint") == [
        AteletCheckpointInput(operation_id=op, worker=worker(1), holder=C1, snapshot=LOCAL)
    ]
    assert ate.fakes.inputs("complete_pause") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=op, snapshot_id=LOCAL.snapshot_id, manifest=MANIFEST, size_bytes=2048
        )
    ]
    assert (result.generation, result.node, result.already_paused) == (5, NODE, False)


async def test_a_paused_actor_returns_at_once(ate: Ate) -> None:
    ate.fakes.script("begin_pause", PausePlan(already_paused=True))
    result = await ate.execute(RUN, PauseActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_pause"]
    assert result.already_paused and result.generation is None


async def test_an_unknown_actor_is_refused(ate: Ate) -> None:
    ate.fakes.script("begin_pause", store_failure(NotFound("actor demo/c1 not found")))
    failure = await ate.failure(RUN, PauseActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("NotFound", "actor demo/c1 not found")
    assert ate.fakes.names() == ["begin_pause"]


async def test_a_suspended_actor_cannot_be_paused(ate: Ate) -> None:
    ate.fakes.script("begin_pause", store_failure(refused(TRANSITIONS[Operation.PAUSE], C1.key, "SUSPENDED")))
    failure = await ate.failure(RUN, PauseActorInput(actor=C1), id=ID)
    assert failure.type == "FailedPrecondition"
    assert failure.message == "actor demo/c1 cannot be paused from state SUSPENDED (PauseActor wants RUNNING or FROZEN)"
    assert ate.fakes.names() == ["begin_pause"]


async def test_a_failed_checkpoint_drops_the_local_snapshot_and_the_actor_keeps_running(ate: Ate) -> None:
    ate.fakes.script("begin_pause", PLAN).script("rollback_suspend", None)
    full = "no space left on device"
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, full, "Checkpoint")
    )
    failure = await ate.failure(RUN, PauseActorInput(actor=C1), id=ID)
    cause = f"while calling atelet Checkpoint on 127.0.0.1:8085: {full}"
    assert failure.type == "AteletFailedPrecondition"
    assert failure.message == f"pause of actor demo/c1 failed; it keeps running: {cause}"
    assert ate.fakes.names() == ["begin_pause", "drain_routers", "atelet_checkpoint", "rollback_suspend"]
    assert ate.fakes.inputs("rollback_suspend") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=ate.run_id, snapshot_id=LOCAL.snapshot_id, manifest={"error": cause}, size_bytes=0
        )
    ]


async def test_a_checkpoint_that_fails_once_is_retried_and_the_pause_succeeds(ate: Ate) -> None:
    unavailable = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "Checkpoint")
    ate.fakes.script("begin_pause", PLAN).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", unavailable, CHECKPOINTED
    )
    ate.fakes.script("complete_pause", None)
    result = await ate.execute(RUN, PauseActorInput(actor=C1), id=ID)
    assert [c.attempt for c in ate.fakes.calls if c.name == "atelet_checkpoint"] == [1, 2]
    assert ate.fakes.names() == [
        "begin_pause",
        "drain_routers",
        "atelet_checkpoint",
        "atelet_checkpoint",
        "complete_pause",
    ]
    assert result.generation == 5
