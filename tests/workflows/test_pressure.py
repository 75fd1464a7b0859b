"""ResumeActor's pressure step (workflows/pressure.py): a resume that finds no room moves an
opted-in actor off its worker (its own SuspendActor, as a child under its workflow ID, with the
reason naming the resume, giving way to traffic) and is placed after; a move that gives way to a
request is passed over for the next; with nobody to move the resume is refused as before.

Fakes stand for the activities: the order of the calls and their inputs are what is checked.
"""

from __future__ import annotations

from domain.operations.atelet_calls import AteletCheckpointResult
from domain.operations.pressure import PressureInput, PressureVictimRef, PressureVictims
from domain.operations.resume import ResumeActorInput
from domain.operations.router_drain import RouterDrainInput, RouterDrainResult
from domain.operations.suspend import BeginSuspendInput, SuspendPlan
from domain.refs import ActorRef
from store import NoCapacity
from tests.workflows.fakes import store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import C1, DRAINED, MANIFEST, snapshot, worker
from tests.workflows.test_resume_actor import DONE
from workflows.resume_actor import ResumeActorWorkflow

V1 = ActorRef("demo", "idle-1")
V2 = ActorRef("demo", "idle-2")
FULL = store_failure(NoCapacity("no worker has room for the actor demo/c1: all 1 matching workers have every place taken"))
STORED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=10, timings={}, completed_at=1_796_000_000.0)
BUSY = RouterDrainResult(drain_id=3, acknowledged=["router-a"], busy=["router-a"], waited_seconds=0.001)


def victim(ref: ActorRef) -> PressureVictimRef:
    return PressureVictimRef(actor=ref, action="Suspend", pool="pool-a")


async def test_a_resume_with_no_room_moves_an_opted_in_actor_and_is_placed(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", FULL, DONE)
    ate.fakes.script("pressure_victims", PressureVictims([victim(V1)]))
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", STORED)
    result = await ate.execute(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert result.worker == DONE.plan.worker and "pressure" in result.timings
    assert ate.fakes.names() == [
        "place_and_restore", "pressure_victims", "begin_suspend", "drain_routers", "atelet_checkpoint",
        "place_and_restore",
    ]  # fmt: skip
    assert ate.fakes.inputs("pressure_victims") == [PressureInput(actor=C1, tried=[])]
    [begin] = ate.fakes.inputs("begin_suspend")
    assert (begin.actor, begin.reason) == (V1, "pressure: room for demo/c1")
    [drain] = ate.fakes.inputs("drain_routers")
    assert (drain.actor, drain.if_idle) == (V1, True)  # the victim gives way to a request in flight


async def test_a_victim_with_a_request_in_flight_is_passed_over_for_the_next(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", FULL, DONE)
    ate.fakes.script("pressure_victims", PressureVictims([victim(V1)]), PressureVictims([victim(V2)]))
    ate.fakes.script(
        "begin_suspend",
        SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)),
        SuspendPlan(already_suspended=False, worker=worker(3), snapshot=snapshot(8)),
    )
    ate.fakes.script("drain_routers", BUSY, DRAINED).script("rollback_suspend", None)
    ate.fakes.script("atelet_checkpoint", STORED)
    await ate.execute(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert ate.fakes.inputs("pressure_victims") == [PressureInput(actor=C1, tried=[]), PressureInput(actor=C1, tried=[V1])]
    assert [d.actor for d in ate.fakes.inputs("drain_routers")] == [V1, V2]
    assert [(r.actor, r.abandoned) for r in ate.fakes.inputs("rollback_suspend")] == [(V1, True)]
    assert ate.fakes.names()[-1] == "place_and_restore"


async def test_with_nobody_to_move_the_resume_is_refused_as_before(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", FULL)
    ate.fakes.script("pressure_victims", PressureVictims([]))
    failure = await ate.failure(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert failure.type == "NoCapacity"
    assert failure.message.startswith("no worker has room for the actor demo/c1")
    assert ate.fakes.names() == ["place_and_restore", "pressure_victims"]


async def test_a_resume_tries_at_most_three_moves(ate: Ate) -> None:
    victims = [ActorRef("demo", f"v{i}") for i in range(3)]
    ate.fakes.script("place_and_restore", FULL)
    ate.fakes.script("pressure_victims", *[PressureVictims([victim(v)]) for v in victims])
    ate.fakes.script(
        "begin_suspend", *[SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)) for _ in victims]
    )
    ate.fakes.script("drain_routers", BUSY, BUSY, BUSY).script("rollback_suspend", None, None, None)
    failure = await ate.failure(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert failure.type == "NoCapacity"
    assert [d.actor for d in ate.fakes.inputs("drain_routers")] == victims
    assert ate.fakes.names().count("pressure_victims") == 3


async def test_begin_suspend_of_a_victim_carries_only_what_the_suspend_needs(ate: Ate) -> None:
    # The suspend a pressure move starts is an ordinary sync suspend of the victim.
    ate.fakes.script("place_and_restore", FULL, DONE)
    ate.fakes.script("pressure_victims", PressureVictims([victim(V1)]))
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=True))
    await ate.execute(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    [begin] = ate.fakes.inputs("begin_suspend")
    assert begin == BeginSuspendInput(actor=V1, operation_id=begin.operation_id, mode="sync", reason="pressure: room for demo/c1")
    assert ate.fakes.inputs("drain_routers") == [] and RouterDrainInput  # already suspended: nothing to drain
