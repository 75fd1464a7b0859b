"""EvictionDeadline (workflows/eviction_deadline.py): the drain of a node. Its actors are suspended
by SuspendActor children (real ones, on the fakes too); what is still there at the deadline
(30 minutes, skipped by the test server) is terminated, each with its own atelet operation ID,
and marked CRASHED; a PAUSED actor left there is marked CRASHED without a terminate."""

from __future__ import annotations

import time

import grpc

from domain.operations.atelet_calls import AteletCheckpointResult, AteletTerminateInput
from domain.operations.drain import BeginDrainInput, CrashInput, DrainPlan, EvictionDeadlineInput, Leftover
from domain.operations.snapshot_gc import SnapshotGcInput
from domain.operations.suspend import BeginSuspendInput, SuspendPlan
from tests.workflows.fakes import atelet_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import DRAINED, MANIFEST, NODE, actor, snapshot, worker
from workflows.eviction_deadline import EvictionDeadlineWorkflow
from workflows.snapshot_gc import SnapshotGarbageCollectionWorkflow

RUN = EvictionDeadlineWorkflow.run
ID = f"node/{NODE}/drain"
REQUEST = EvictionDeadlineInput(node=NODE, deadline_seconds=1800.0)
A1, A2, A3, P1 = actor("a1"), actor("a2"), actor("a3"), actor("p1")
LEFT = [Leftover(actor=A2, worker=worker(2)), Leftover(actor=A3, worker=worker(3)), Leftover(actor=P1, worker=None)]


def suspend_plan(request: BeginSuspendInput) -> SuspendPlan:
    """begin_suspend of any actor on the node: checkpoint it from worker 1."""
    owner = f"{request.actor.atespace}/actors/{request.actor.name}"
    return SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(2, owner=owner))


def script_suspends(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", suspend_plan)
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_checkpoint", AteletCheckpointResult(manifest=MANIFEST, size_bytes=1024)
    )
    ate.fakes.script("complete_suspend", None)


async def test_a_drain_suspends_the_nodes_actors_and_ends_when_the_node_is_empty(ate: Ate) -> None:
    script_suspends(ate)
    ate.fakes.script("begin_drain", DrainPlan(running=[A1, A2])).script("drain_leftovers", [])
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert ate.fakes.inputs("begin_drain") == [BeginDrainInput(node=NODE, deadline_seconds=1800.0)]
    # One real SuspendActor per actor, under the actor's own workflow ID (its per-actor lock).
    suspended = ate.fakes.inputs("begin_suspend")
    assert sorted(request.actor.name for request in suspended) == ["a1", "a2"]
    assert all(request.mode == "sync" for request in suspended)
    assert {(await ate.client.get_workflow_handle(a.workflow_id).describe()).workflow_type for a in (A1, A2)} == {
        "SuspendActor"
    }
    assert ate.fakes.inputs("drain_leftovers") == [NODE]
    assert (result.suspended, result.crashed) == (["demo/a1", "demo/a2"], [])
    assert "atelet_terminate" not in ate.fakes.names() and "crash_after_deadline" not in ate.fakes.names()


async def test_what_is_left_at_the_deadline_is_terminated_each_under_its_own_id_and_crashed(ate: Ate) -> None:
    script_suspends(ate)
    ate.fakes.script("begin_drain", DrainPlan(running=[A1])).script("drain_leftovers", LEFT)
    ate.fakes.script("atelet_terminate", True).script("crash_after_deadline", None)
    wall = time.monotonic()
    result = await ate.execute(RUN, REQUEST, id=ID)
    wall = time.monotonic() - wall
    # Time skipping, not speed: the 30 minutes of drain (181 checks) take ~0.5 s of wall time, and
    # without skipping they would take 30 minutes; 2 s failed once on a busy CI machine (2.4 s).
    assert wall < 60.0, f"30 minutes of drain took {wall:.2f} s of wall time: the time-skipping server did not skip"

    after_deadline = ate.fakes.names()[ate.fakes.names().index("atelet_terminate") :]
    assert after_deadline == ["atelet_terminate", "crash_after_deadline"] * 2 + ["crash_after_deadline"]
    terminates: list[AteletTerminateInput] = ate.fakes.inputs("atelet_terminate")
    assert [(t.holder, t.worker) for t in terminates] == [(A2, worker(2)), (A3, worker(3))]
    ids = [t.operation_id for t in terminates]
    # The atelet answers a repeated operation ID with the first call's result: one ID each.
    assert len(set(ids)) == len(ids) and all(i.startswith(ate.run_id) for i in ids)
    reason = f"eviction deadline passed: node {NODE} was drained and the actor was not %s within 1800 s"
    assert ate.fakes.inputs("crash_after_deadline") == [
        CrashInput(actor=A2, worker_id=2, reason=reason % "suspended", node=NODE),
        CrashInput(actor=A3, worker_id=3, reason=reason % "suspended", node=NODE),
        CrashInput(actor=P1, worker_id=None, reason=reason % "uploaded from its paused snapshot", node=NODE),
    ]
    assert (result.suspended, result.crashed) == (["demo/a1"], ["demo/a2", "demo/a3", "demo/p1"])

    # Checked every 10 s of workflow time until the deadline, and not a moment before it. Workflow
    # time is the timers skipped plus the wall time the run took (the activities' real time counts
    # too), so the timers alone may sum to less than 1800 s by up to `wall` (1798.8 s was seen with
    # 181 checks on a busy machine).
    pauses = await ate.timers()
    assert all(pause <= 10.0 for pause in pauses)
    assert sum(pauses) + wall >= 1800.0
    assert ate.fakes.names().count("drain_leftovers") == len(pauses) + 1


async def test_a_leftover_whose_terminate_fails_is_crashed_anyway(ate: Ate) -> None:
    ate.fakes.script("begin_drain", DrainPlan()).script("drain_leftovers", LEFT[:1])
    ate.fakes.script(
        "atelet_terminate", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "node draining", "Terminate")
    )
    ate.fakes.script("crash_after_deadline", None)
    result = await ate.execute(RUN, EvictionDeadlineInput(node=NODE, deadline_seconds=60.0), id=ID)
    assert ate.fakes.names()[-2:] == ["atelet_terminate", "crash_after_deadline"]
    assert result.crashed == ["demo/a2"]


async def test_an_actor_busy_with_another_operation_is_left_to_it_and_checked_again(ate: Ate) -> None:
    # Any running workflow under the actor's ID holds its lock; a collector is one that waits.
    ate.fakes.script("garbage_snapshots", [])
    await ate.start(SnapshotGarbageCollectionWorkflow.run, SnapshotGcInput(), id=A1.workflow_id)
    await ate.fakes.wait_for("garbage_snapshots")
    ate.fakes.script("begin_drain", DrainPlan(running=[A1])).script("drain_leftovers", [])
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert "begin_suspend" not in ate.fakes.names()  # no second operation on a1
    assert (result.suspended, result.crashed) == ([], [])
    assert ate.fakes.names()[-1] == "drain_leftovers"


async def test_a_failed_child_suspend_leaves_the_actor_to_the_deadline(ate: Ate) -> None:
    ate.fakes.script("begin_suspend", suspend_plan).script("rollback_suspend", None)
    ate.fakes.script("suspend_completed", False)
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "open connection", "Checkpoint")
    )
    ate.fakes.script("begin_drain", DrainPlan(running=[A1]))
    ate.fakes.script("drain_leftovers", [Leftover(actor=A1, worker=worker(1))])
    ate.fakes.script("atelet_terminate", True).script("crash_after_deadline", None)
    result = await ate.execute(RUN, EvictionDeadlineInput(node=NODE, deadline_seconds=60.0), id=ID)
    assert (result.suspended, result.crashed) == ([], ["demo/a1"])
    assert ate.fakes.names()[:6] == [
        "begin_drain",
        "begin_suspend",
        "drain_routers",
        "atelet_checkpoint",
        "suspend_completed",
        "rollback_suspend",
    ]
