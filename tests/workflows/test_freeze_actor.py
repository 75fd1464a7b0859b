"""FreezeActor (workflows/freeze_actor.py), and the idle operations that give way to traffic:
a freeze that stops the sandbox in place, one that a request in flight wins (the actor stays
RUNNING, the sandbox untouched), one the atelet refuses (rolled back), and an idle suspend and
pause abandoned the same way before their checkpoint."""

from __future__ import annotations

import grpc

from domain.operations.freeze import (
    AteletFreezeInput,
    AteletFreezeResult,
    BeginFreezeInput,
    FinishFreezeInput,
    FreezeActorInput,
    FreezePlan,
)
from domain.operations.pause import PauseActorInput, PausePlan
from domain.operations.router_drain import RouterDrainInput, RouterDrainResult
from domain.operations.suspend import (
    BeginSuspendInput,
    CompleteSnapshotInput,
    SuspendActorInput,
    SuspendPlan,
)
from domain.states import TRANSITIONS, Operation
from store.errors import refused
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import C1, DRAINED, snapshot, worker
from workflows.freeze_actor import FreezeActorWorkflow
from workflows.pause_actor import PauseActorWorkflow
from workflows.suspend_actor import ABANDONED, SuspendActorWorkflow

ID = C1.workflow_id
PLAN = FreezePlan(already_frozen=False, worker=worker(1))
FROZE = AteletFreezeResult(changed=True, seconds=0.004, method="cgroup v1 freezer")
BUSY = RouterDrainResult(drain_id=2, acknowledged=["router-a", "router-b"], busy=["router-b"], waited_seconds=0.003)


async def test_a_freeze_marks_frozen_drains_then_stops_the_sandbox(ate: Ate) -> None:
    ate.fakes.script("begin_freeze", PLAN).script("drain_routers", DRAINED).script("atelet_freeze", FROZE)
    ate.fakes.script("finish_freeze", None)
    result = await ate.execute(FreezeActorWorkflow.run, FreezeActorInput(actor=C1, reason="idle for 20 s"), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_freeze", "drain_routers", "atelet_freeze", "finish_freeze"]
    assert ate.fakes.inputs("begin_freeze") == [BeginFreezeInput(actor=C1, operation_id=op, reason="idle for 20 s")]
    assert ate.fakes.inputs("drain_routers") == [RouterDrainInput(actor=C1, operation_id=op, if_idle=False)]
    assert ate.fakes.inputs("atelet_freeze") == [AteletFreezeInput(operation_id=op, worker=worker(1), holder=C1)]
    assert ate.fakes.inputs("finish_freeze") == [FinishFreezeInput(actor=C1, operation_id=op)]
    assert (result.already_frozen, result.abandoned) == (False, False)
    assert result.timings["atelet_freeze"] == 0.004


async def test_a_frozen_actor_returns_at_once(ate: Ate) -> None:
    ate.fakes.script("begin_freeze", FreezePlan(already_frozen=True))
    result = await ate.execute(FreezeActorWorkflow.run, FreezeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_freeze"]
    assert result.already_frozen


async def test_an_idle_freeze_gives_way_to_a_request_in_flight(ate: Ate) -> None:
    ate.fakes.script("begin_freeze", PLAN).script("drain_routers", BUSY).script("rollback_freeze", None)
    result = await ate.execute(FreezeActorWorkflow.run, FreezeActorInput(actor=C1, if_idle=True), id=ID)
    op = ate.run_id
    # the sandbox is never touched: no atelet call
    assert ate.fakes.names() == ["begin_freeze", "drain_routers", "rollback_freeze"]
    assert ate.fakes.inputs("drain_routers") == [RouterDrainInput(actor=C1, operation_id=op, if_idle=True)]
    assert ate.fakes.inputs("rollback_freeze") == [FinishFreezeInput(actor=C1, operation_id=op, error=None)]
    assert result.abandoned


async def test_a_freeze_the_atelet_refuses_is_rolled_back_to_running(ate: Ate) -> None:
    ate.fakes.script("begin_freeze", PLAN).script("drain_routers", DRAINED)
    ate.fakes.script("atelet_freeze", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "worker w-1 runs no sandbox"))
    ate.fakes.script("rollback_freeze", None)
    failure = await ate.failure(FreezeActorWorkflow.run, FreezeActorInput(actor=C1), id=ID)
    assert failure.message.startswith("freeze of actor demo/c1 failed; it keeps running: ")
    assert "worker w-1 runs no sandbox" in failure.message
    [rollback] = ate.fakes.inputs("rollback_freeze")
    assert rollback.error is not None and "worker w-1 runs no sandbox" in rollback.error


async def test_only_a_running_actor_can_be_frozen(ate: Ate) -> None:
    ate.fakes.script("begin_freeze", store_failure(refused(TRANSITIONS[Operation.FREEZE], C1.key, "SUSPENDED")))
    failure = await ate.failure(FreezeActorWorkflow.run, FreezeActorInput(actor=C1), id=ID)
    assert failure.type == "FailedPrecondition"
    assert failure.message == "actor demo/c1 cannot be frozen from state SUSPENDED (FreezeActor wants RUNNING)"


async def test_an_idle_suspend_gives_way_before_its_checkpoint(ate: Ate) -> None:
    pending = snapshot(6)
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=pending))
    ate.fakes.script("drain_routers", BUSY).script("rollback_suspend", None)
    request = SuspendActorInput(actor=C1, reason="idle for 300 s", if_idle=True)
    result = await ate.execute(SuspendActorWorkflow.run, request, id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_suspend", "drain_routers", "rollback_suspend"]
    assert ate.fakes.inputs("begin_suspend") == [BeginSuspendInput(actor=C1, operation_id=op, reason="idle for 300 s")]
    assert ate.fakes.inputs("rollback_suspend") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=op, snapshot_id=pending.snapshot_id, manifest={"error": ABANDONED}, size_bytes=0,
            abandoned=True,
        )
    ]  # fmt: skip
    assert result.abandoned and result.generation is None


async def test_a_suspend_a_user_asked_for_is_not_abandoned_by_a_busy_answer_it_never_asks(ate: Ate) -> None:
    # Without if_idle the drain is the usual one (the replicas finish or cut what is in flight).
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(6)))
    ate.fakes.script("drain_routers", DRAINED)
    ate.fakes.script("atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "stop here"))
    ate.fakes.script("suspend_completed", False).script("rollback_suspend", None)
    await ate.failure(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=ID)
    assert ate.fakes.inputs("drain_routers") == [RouterDrainInput(actor=C1, operation_id=ate.run_id, if_idle=False)]


async def test_an_idle_pause_gives_way_before_its_checkpoint(ate: Ate) -> None:
    local = snapshot(5, local=True)
    ate.fakes.script("begin_pause", PausePlan(already_paused=False, worker=worker(1), snapshot=local))
    ate.fakes.script("drain_routers", BUSY).script("rollback_suspend", None)
    result = await ate.execute(
        PauseActorWorkflow.run, PauseActorInput(actor=C1, reason="idle for 60 s", if_idle=True), id=ID
    )
    assert ate.fakes.names() == ["begin_pause", "drain_routers", "rollback_suspend"]
    [rollback] = ate.fakes.inputs("rollback_suspend")
    assert rollback.abandoned and rollback.snapshot_id == local.snapshot_id
    assert result.abandoned and result.generation is None


async def test_a_freeze_whose_outcome_is_unknown_rests_frozen(ate: Ate) -> None:
    # The atelet stopped answering after it may have frozen the sandbox: FROZEN is the safe state.
    gone = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", unreachable=True)
    ate.fakes.script("begin_freeze", PLAN).script("drain_routers", DRAINED)
    ate.fakes.script("atelet_freeze", gone, gone, gone, gone).script("finish_freeze", None)
    failure = await ate.failure(FreezeActorWorkflow.run, FreezeActorInput(actor=C1), id=ID)
    assert failure.message.startswith("freeze of actor demo/c1 may not have completed; it rests FROZEN")
    assert "rollback_freeze" not in ate.fakes.names()
    [settled] = ate.fakes.inputs("finish_freeze")
    assert settled.error is not None


async def test_a_busy_answer_does_not_stop_a_suspend_a_user_asked_for(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(6)))
    ate.fakes.script("drain_routers", BUSY)  # a router that says busy to an ordinary drain is not obeyed
    ate.fakes.script("atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "stop here"))
    ate.fakes.script("suspend_completed", False).script("rollback_suspend", None)
    await ate.failure(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=ID)
    assert "atelet_checkpoint" in ate.fakes.names()
