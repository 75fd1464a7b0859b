"""ResumeActor's pressure step (workflows/pressure.py): a resume that finds no room moves an
opted-in actor off its worker (its own SuspendActor, as a child under its workflow ID, with the
reason naming the resume, giving way to traffic) and is placed after; a move that gives way to a
request is passed over for the next, and its worker kept for nobody; with nobody to move the
resume is refused as before, leaving the room queue. In the room queue a move may empty a worker
for an older waiting resume, which is told by signal; a resume asked to wait for room waits for
that signal (or its poll) and tries again.

Fakes stand for the activities: the order of the calls and their inputs are what is checked.
"""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from domain.operations.atelet_calls import AteletCheckpointResult
from domain.operations.pressure import LeaveRoomQueueInput, PressureVictimRef, PressureVictims, ReleaseRoomInput
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
    [asked] = ate.fakes.inputs("pressure_victims")
    assert (asked.actor, asked.tried) == (C1, [])
    assert asked.operation_id == ate.started[-1].result_run_id  # it joins the room queue as this run
    [placed] = ate.fakes.inputs("place_and_restore")[-1:]
    assert placed.waited_for_room  # its bind leaves the queue
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
    ate.fakes.script("atelet_checkpoint", STORED).script("release_room", None)
    await ate.execute(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert [(i.actor, i.tried) for i in ate.fakes.inputs("pressure_victims")] == [(C1, []), (C1, [V1])]
    assert [d.actor for d in ate.fakes.inputs("drain_routers")] == [V1, V2]
    assert [(r.actor, r.abandoned) for r in ate.fakes.inputs("rollback_suspend")] == [(V1, True)]
    assert ate.fakes.inputs("release_room") == [ReleaseRoomInput(victims=[V1])]  # V1 stays: its worker is nobody's
    assert ate.fakes.names()[-1] == "place_and_restore"


async def test_with_nobody_to_move_the_resume_is_refused_as_before(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", FULL)
    ate.fakes.script("pressure_victims", PressureVictims([])).script("leave_room_queue", None)
    failure = await ate.failure(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id)
    assert failure.type == "NoCapacity"
    assert failure.message.startswith("no worker has room for the actor demo/c1")
    assert ate.fakes.names() == ["place_and_restore", "pressure_victims", "leave_room_queue"]
    assert ate.fakes.inputs("leave_room_queue") == [LeaveRoomQueueInput(actor=C1)]  # no move is made for it in vain


async def test_a_resume_tries_at_most_three_moves(ate: Ate) -> None:
    victims = [ActorRef("demo", f"v{i}") for i in range(3)]
    ate.fakes.script("place_and_restore", FULL)
    ate.fakes.script("pressure_victims", *[PressureVictims([victim(v)]) for v in victims])
    ate.fakes.script(
        "begin_suspend", *[SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)) for _ in victims]
    )
    ate.fakes.script("drain_routers", BUSY, BUSY, BUSY).script("rollback_suspend", None, None, None)
    ate.fakes.script("release_room", None).script("leave_room_queue", None)
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


async def test_a_resume_asked_to_wait_for_room_tries_again_until_a_worker_frees(ate: Ate) -> None:
    # Nobody can be moved now (every opted-in actor is being moved for another resume): the resume
    # waits ROOM_POLL_SECONDS and tries placement and pressure again, and is placed once a worker
    # freed (the third placement) instead of answering NoCapacity.
    ate.fakes.script("place_and_restore", FULL, FULL, DONE)
    ate.fakes.script("pressure_victims", PressureVictims([])).script("leave_room_queue", None)
    result = await ate.execute(
        ResumeActorWorkflow.run, ResumeActorInput(actor=C1, room_wait_seconds=5.0), id=C1.workflow_id
    )
    assert result.worker == DONE.plan.worker
    assert ate.fakes.names() == [
        "place_and_restore", "pressure_victims", "place_and_restore", "pressure_victims", "place_and_restore",
    ]  # fmt: skip


async def test_a_resume_that_waited_for_room_in_vain_answers_no_capacity_by_its_deadline(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", FULL)
    ate.fakes.script("pressure_victims", PressureVictims([])).script("leave_room_queue", None)
    handle = await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1, room_wait_seconds=1.2), id=C1.workflow_id)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.type == "NoCapacity"
    # Tried at 0 s; a timer may fire up to TIMER_LATENESS_SECONDS (1 s) late, so the one wait is
    # cut to 1.2 - 1.0 = 0.2 s, and after the second try no time is left that a timer could not
    # overrun: 2 tries, then it leaves the queue, and the answer comes before the 1.2 s deadline.
    names = ate.fakes.names()
    assert names.count("place_and_restore") == 2 and names[-1] == "leave_room_queue", names
    events = [e async for e in handle.fetch_history_events()]
    took = (events[-1].event_time.ToDatetime() - events[0].event_time.ToDatetime()).total_seconds()
    assert 0.2 <= took < 1.2, took  # it waited, and answered by its deadline, not after it


async def test_a_move_for_an_older_waiter_tells_it_and_this_resume_waits_its_turn(ate: Ate) -> None:
    # The worker V1's move empties is kept for an older waiting resume (demo/old, its run R): it is
    # told by signal, this resume tries the next actor, V2, whose worker is kept for it.
    older = ActorRef("demo", "old")
    got = await ate.client.start_workflow(
        ResumeActorWorkflow.run, ResumeActorInput(actor=older, room_wait_seconds=30.0), id=older.workflow_id,
        task_queue=ate.task_queue,
    )  # fmt: skip
    ate.fakes.script(
        "place_and_restore",
        lambda request: DONE if request.actor == C1 and any(i.actor == C1 and i.tried for i in ate.fakes.inputs("pressure_victims")) else FULL(request),
    )
    ate.fakes.script(
        "pressure_victims",
        lambda request: PressureVictims([])
        if request.actor == older
        else (
            PressureVictims([victim(V1)], room_for=older, room_for_operation=got.result_run_id or "")
            if not request.tried
            else PressureVictims([victim(V2)])
        ),
    )
    await ate.fakes.wait_for("pressure_victims")  # the older one waits in the queue
    ate.fakes.script(
        "begin_suspend",
        SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)),
        SuspendPlan(already_suspended=False, worker=worker(3), snapshot=snapshot(8)),
    )
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", STORED).script("leave_room_queue", None)
    result = await ate.execute(ResumeActorWorkflow.run, ResumeActorInput(actor=C1, room_wait_seconds=30.0), id=C1.workflow_id)
    assert result.worker == DONE.plan.worker
    reasons = [b.reason for b in ate.fakes.inputs("begin_suspend")]
    assert reasons == ["pressure: room for demo/old", "pressure: room for demo/c1"]
    # The older one was told: it tried again at once (a third pressure_victims of its own would
    # otherwise come only after its 0.5 s poll) and was placed (the fake now places anyone).
    ate.fakes.script("place_and_restore", DONE)
    placed = await got.result()
    assert placed.worker == DONE.plan.worker
    history = [e async for e in got.fetch_history_events()]
    assert any(e.HasField("workflow_execution_signaled_event_attributes") for e in history)
