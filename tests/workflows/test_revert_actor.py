"""RevertActor (workflows/revert_actor.py): terminate and finalize; fencing when the node is gone or
does not answer; an actor without a worker; refusals; a retried terminate."""

from __future__ import annotations

import grpc

from domain.operations.atelet_calls import AteletTerminateInput
from domain.operations.revert import BeginRevertInput, FenceInput, FinishRevertInput, RevertActorInput, RevertPlan
from domain.operations.router_drain import RouterDrainInput
from domain.states import TRANSITIONS, Operation
from store import NotFound, StoreError
from store.errors import refused
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import C1, DRAINED, NODE, worker
from workflows.revert_actor import RevertActorWorkflow
from workflows.steps import REVERT_DRAIN_MAX_SECONDS

RUN = RevertActorWorkflow.run
ID = C1.workflow_id
UNREACHABLE = f"fenced: demo/c1 was reverted while node {NODE} was unreachable"


async def test_a_running_actor_is_terminated_and_reverted(ate: Ate) -> None:
    ate.fakes.script("begin_revert", RevertPlan(from_state="RUNNING", worker=worker(1), node_alive=True))
    ate.fakes.script("atelet_terminate", True).script("drain_routers", DRAINED).script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    op = ate.run_id
    # the routers forget the actor before its worker is freed (may host another actor next)
    assert ate.fakes.names() == ["begin_revert", "atelet_terminate", "drain_routers", "finish_revert"]
    assert ate.fakes.inputs("drain_routers") == [
        RouterDrainInput(actor=C1, operation_id=op, max_wait_seconds=REVERT_DRAIN_MAX_SECONDS)
    ]
    assert ate.fakes.inputs("begin_revert") == [BeginRevertInput(actor=C1, operation_id=op)]
    assert ate.fakes.inputs("atelet_terminate") == [AteletTerminateInput(operation_id=op, worker=worker(1), holder=C1)]
    assert ate.fakes.inputs("finish_revert") == [
        FinishRevertInput(actor=C1, operation_id=op, note="reverted from RUNNING")
    ]
    assert (result.from_state, result.fenced) == ("RUNNING", False)


async def test_a_stuck_resume_on_a_dead_node_is_reverted_by_fencing_its_worker(ate: Ate) -> None:
    ate.fakes.script("begin_revert", RevertPlan(from_state="RESUMING", worker=worker(1), node_alive=False))
    ate.fakes.script("fence_worker", None).script("drain_routers", DRAINED).script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_revert", "fence_worker", "drain_routers", "finish_revert"]  # no call to a dead node
    assert ate.fakes.inputs("fence_worker") == [FenceInput(worker_id=1, reason=UNREACHABLE)]
    assert ate.fakes.inputs("finish_revert") == [
        FinishRevertInput(
            actor=C1,
            operation_id=ate.run_id,
            note="reverted from RESUMING (old worker fenced: its node was unreachable)",
        )
    ]
    assert (result.from_state, result.fenced) == ("RESUMING", True)


async def test_a_terminate_that_gets_no_answer_fences_the_worker_and_the_revert_finishes(ate: Ate) -> None:
    ate.fakes.script("begin_revert", RevertPlan(from_state="RUNNING", worker=worker(1), node_alive=True))
    ate.fakes.script("atelet_terminate", atelet_failure(grpc.StatusCode.UNAVAILABLE, "connection refused", "Terminate"))
    ate.fakes.script("fence_worker", None).script("drain_routers", DRAINED).script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == [
        "begin_revert", *["atelet_terminate"] * 4, "fence_worker", "drain_routers", "finish_revert"
    ]  # fmt: skip
    assert ate.fakes.inputs("fence_worker") == [FenceInput(worker_id=1, reason=UNREACHABLE)]
    assert result.fenced


async def test_an_actor_without_a_worker_is_only_finalized(ate: Ate) -> None:
    ate.fakes.script("begin_revert", RevertPlan(from_state="PAUSED", worker=None, node_alive=False))
    ate.fakes.script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["begin_revert", "finish_revert"]
    assert (result.from_state, result.fenced) == ("PAUSED", False)


async def test_an_unknown_actor_is_refused(ate: Ate) -> None:
    ate.fakes.script("begin_revert", store_failure(NotFound("actor demo/c1 not found")))
    failure = await ate.failure(RUN, RevertActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("NotFound", "actor demo/c1 not found")
    assert ate.fakes.names() == ["begin_revert"]


async def test_a_suspended_actor_is_not_revertable(ate: Ate) -> None:
    ate.fakes.script("begin_revert", store_failure(refused(TRANSITIONS[Operation.REVERT], C1.key, "SUSPENDED")))
    failure = await ate.failure(RUN, RevertActorInput(actor=C1), id=ID)
    assert failure.type == "FailedPrecondition"
    assert failure.message == (
        "actor demo/c1 cannot be reverted from state SUSPENDED "
        "(RevertActor wants RESUMING, RUNNING, FROZEN, UNREACHABLE, SUSPENDING, PAUSING, PAUSED, REVERTING or CRASHED)"
    )
    assert ate.fakes.names() == ["begin_revert"]


async def test_a_terminate_that_fails_once_is_retried_and_nothing_is_fenced(ate: Ate) -> None:
    ate.fakes.script("begin_revert", RevertPlan(from_state="CRASHED", worker=worker(1), node_alive=True))
    unavailable = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "Terminate")
    ate.fakes.script("atelet_terminate", unavailable, True).script("drain_routers", DRAINED)
    ate.fakes.script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    assert [c.attempt for c in ate.fakes.calls if c.name == "atelet_terminate"] == [1, 2]
    assert ate.fakes.names() == [
        "begin_revert", "atelet_terminate", "atelet_terminate", "drain_routers", "finish_revert"
    ]  # fmt: skip
    assert not result.fenced


async def test_an_automatic_recovery_says_so_and_carries_the_crash_into_the_record(ate: Ate) -> None:
    # the api-server starts it for a CRASHED actor of an `onCrash: Revert` template (api/recovery.py)
    crash = "node dur did not answer within the grace"
    ate.fakes.script("begin_revert", RevertPlan(from_state="CRASHED", worker=None, node_alive=False))
    ate.fakes.script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1, recovery_of=crash), id=ID)
    assert ate.fakes.names() == ["begin_revert", "finish_revert"]  # a CRASHED actor holds no worker
    assert ate.fakes.inputs("finish_revert") == [
        FinishRevertInput(
            actor=C1,
            operation_id=ate.run_id,
            note="reverted from CRASHED automatically (its template says onCrash: Revert)",
            recovery_of=crash,
        )
    ]
    assert (result.from_state, result.fenced) == ("CRASHED", False)


async def test_a_drain_that_fails_for_good_does_not_stop_the_revert(ate: Ate) -> None:
    # The sandbox is gone already: the actor must not stay REVERTING because the routers could
    # not be told (each router also forgets it on the NOTIFY of REVERTING).
    ate.fakes.script("begin_revert", RevertPlan(from_state="RUNNING", worker=worker(1), node_alive=True))
    down = StoreError("the database is down")
    ate.fakes.script("atelet_terminate", True).script("drain_routers", store_failure(down))
    ate.fakes.script("finish_revert", None)
    result = await ate.execute(RUN, RevertActorInput(actor=C1), id=ID)
    assert ate.fakes.names()[-1] == "finish_revert"
    assert (result.from_state, result.fenced) == ("RUNNING", False)
