"""ResumeActor (workflows/resume_actor.py): placement, restore and finalize in one activity
(`place_and_restore`); the rollback of a failed restore, and what is left when its answer was
lost; the detach of a paused actor whose node is full, then the steps one by one; refusals;
retries; already RUNNING. Runs recorded before that shape are replayed by test_replay.py."""

from __future__ import annotations

import grpc
import pytest

from domain.operations.atelet_calls import (
    AteletCheckpointResult,
    AteletCopyInput,
    AteletRunInput,
    AteletRunResult,
    AteletTerminateInput,
)
from domain.operations.common import FinishInput
from domain.operations.pressure import PressureVictims
from domain.operations.resume import (
    BeginResumeInput,
    PlaceAndRestoreInput,
    PlaceAndRestoreResult,
    ResumeActorInput,
    ResumePlan,
    ResumeProgress,
)
from domain.operations.revert import FenceInput
from domain.operations.suspend import BeginSuspendInput, CompleteSnapshotInput, SuspendPlan
from domain.states import TRANSITIONS, Operation
from store import ActorUnreachable, NoCapacity, NoMatchingWorker, NotFound, PinnedNodeFull, StoreError, VersionConflict
from store.errors import refused
from tests.workflows.fakes import atelet_failure, fail, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import ATELET, C1, MANIFEST, NODE, SPEC, snapshot, worker
from workflows.resume_actor import ResumeActorWorkflow

RUN = ResumeActorWorkflow.run
ID = C1.workflow_id
PLAN = ResumePlan(already_running=False, worker=worker(1), snapshot=snapshot(3, manifest=MANIFEST), spec=SPEC)
RESTORED = AteletRunResult(worker_ip="10.88.0.2", timings={"restore": 0.25, "probe": 0.05})
"""A restore whose activity could not mark the actor RUNNING (Postgres was down for it)."""
MARKED = AteletRunResult(
    worker_ip="10.88.0.2",
    timings={"restore": 0.25, "probe": 0.05, "finalize": 0.004},
    marked_running_at=1_796_000_000.0,
)
"""A restore whose activity marked the actor RUNNING itself."""
DONE = PlaceAndRestoreResult(plan=PLAN, restored=MARKED, placement_seconds=0.002)
PROBE_NEVER_ANSWERED = "wakeup probe GET :8080/readyz of container counter got no answer within 30 s"


async def test_one_activity_places_restores_and_marks_the_actor_running(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", DONE)
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["place_and_restore"]  # no workflow task between the three parts
    assert ate.fakes.inputs("place_and_restore") == [
        PlaceAndRestoreInput(actor=C1, operation_id=op, probe_timeout_seconds=30.0)
    ]
    assert result.actor == C1 and result.worker == worker(1)
    assert result.restored_generation == 3 and not result.already_running
    assert result.timings["placement"] == 0.002 and result.timings["atelet_restore"] == 0.25
    assert {"atelet", "atelet_probe", "atelet_finalize"} <= set(result.timings)
    assert "finalize" not in result.timings


async def test_a_restore_that_could_not_mark_the_actor_running_leaves_it_to_the_finalize_step(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=PLAN, restored=RESTORED))
    ate.fakes.script("finish_resume", None)
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["place_and_restore", "finish_resume"]
    assert ate.fakes.inputs("finish_resume") == [FinishInput(actor=C1, operation_id=ate.run_id)]
    assert {"placement", "atelet", "finalize"} <= set(result.timings)


async def test_the_probe_timeout_is_passed_on_and_a_golden_snapshot_reports_generation_0(ate: Ate) -> None:
    golden = snapshot(0, owner="demo/templates/counter", manifest=MANIFEST)
    plan = ResumePlan(already_running=False, worker=worker(1), snapshot=golden, spec=SPEC)
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=plan, restored=MARKED))
    result = await ate.execute(RUN, ResumeActorInput(actor=C1, probe_timeout_seconds=5.0), id=ID)
    (call,) = ate.fakes.inputs("place_and_restore")
    assert call.probe_timeout_seconds == 5.0
    assert result.restored_generation == 0


async def test_a_running_actor_returns_at_once(ate: Ate) -> None:
    plan = ResumePlan(already_running=True, worker=worker(2), spec=SPEC)
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=plan))
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["place_and_restore"]
    assert result.already_running and result.worker == worker(2) and result.restored_generation is None


async def test_an_actor_an_earlier_attempt_resumed_is_not_reported_as_already_running(ate: Ate) -> None:
    plan = ResumePlan(already_running=True, worker=worker(2), spec=SPEC)
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=plan, resumed_earlier=True))
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["place_and_restore"]
    assert not result.already_running and result.worker == worker(2)


async def test_an_unknown_actor_is_refused_with_nothing_else_called(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", store_failure(NotFound("actor demo/c1 not found")))
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("NotFound", "actor demo/c1 not found")
    assert ate.fakes.names() == ["place_and_restore"]


async def test_a_state_that_allows_no_resume_is_refused_naming_both_states(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", store_failure(refused(TRANSITIONS[Operation.RESUME], C1.key, "SUSPENDING")))
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert failure.type == "FailedPrecondition"
    assert (
        failure.message
        == "actor demo/c1 cannot be resumed from state SUSPENDING (ResumeActor wants SUSPENDED, FROZEN or PAUSED)"
    )
    assert failure.details == ({"state": "SUSPENDING"},)  # what the API puts in the error's details
    assert ate.fakes.names() == ["place_and_restore"]


async def test_no_room_is_refused_with_the_placement_hint(ate: Ate) -> None:
    hint = "no worker has room for the actor demo/c1: all 2 matching workers have every place taken"
    ate.fakes.script("place_and_restore", store_failure(NoCapacity(hint)))
    ate.fakes.script("pressure_victims", PressureVictims([]))  # nobody opted in to make room
    ate.fakes.script("leave_room_queue", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("NoCapacity", hint)
    assert ate.fakes.names() == ["place_and_restore", "pressure_victims", "leave_room_queue"]


@pytest.mark.parametrize(
    "refusal",
    [
        NoMatchingWorker("no worker could ever take the actor demo/c1: no pool has sandbox class microvm"),
        ActorUnreachable("actor demo/c1 is UNREACHABLE: node node-a stopped answering 4 s ago", {"state": "UNREACHABLE"}),
    ],
    ids=["NoMatchingWorker", "Unreachable"],
)
async def test_every_placement_refusal_is_raised_without_looking_up_the_progress(ate: Ate, refusal: StoreError) -> None:
    # A refused placement bound nothing: asking how far the resume got is a round trip for nothing
    # (it once was made for these two: one was misspelled in the workflow, the other missing).
    ate.fakes.script("place_and_restore", store_failure(refusal))
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=None))
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == (refusal.reason, refusal.message)
    assert ate.fakes.names() == ["place_and_restore"]


async def test_a_failed_restore_terminates_and_rolls_back(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, PROBE_NEVER_ANSWERED))
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=worker(1)))
    ate.fakes.script("atelet_terminate", True).script("rollback_resume", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    op = ate.run_id
    cause = f"while calling atelet Restore on 127.0.0.1:8085: {PROBE_NEVER_ANSWERED}"
    assert failure.type == "AteletFailedPrecondition"
    assert failure.message == f"resume of actor demo/c1 failed and was rolled back: {cause}"
    assert ate.fakes.names() == ["place_and_restore", "resume_progress", "atelet_terminate", "rollback_resume"]
    assert ate.fakes.inputs("resume_progress") == [FinishInput(actor=C1, operation_id=op)]
    assert ate.fakes.inputs("atelet_terminate") == [
        AteletTerminateInput(operation_id=op, worker=worker(1), holder=C1, only_own=True)
    ]  # a late rollback must not stop a sandbox that a later resume started there
    assert ate.fakes.inputs("rollback_resume") == [FinishInput(actor=C1, operation_id=op, error=cause)]


async def test_a_failed_restore_whose_terminate_fails_too_fences_the_worker(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, PROBE_NEVER_ANSWERED))
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=worker(1)))
    ate.fakes.script("atelet_terminate", atelet_failure(grpc.StatusCode.UNAVAILABLE, "connection refused", "Terminate"))
    ate.fakes.script("fence_worker", None).script("rollback_resume", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert failure.message.startswith("resume of actor demo/c1 failed and was rolled back: ")
    # An unreachable atelet is retried a few times before the worker is fenced.
    terminates = [call.attempt for call in ate.fakes.calls if call.name == "atelet_terminate"]
    assert terminates == [1, 2, 3, 4]
    assert ate.fakes.names() == [
        "place_and_restore",
        "resume_progress",
        *["atelet_terminate"] * 4,
        "fence_worker",
        "rollback_resume",
    ]
    assert ate.fakes.inputs("fence_worker") == [
        FenceInput(worker_id=1, reason="fenced: terminate of demo/c1 failed after a failed restore")
    ]


async def test_a_restore_that_marked_the_actor_running_and_then_failed_is_not_rolled_back(ate: Ate) -> None:
    # An attempt committed RUNNING, its answer was lost, and the retries failed: the actor runs.
    ate.fakes.script("place_and_restore", atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting"))
    ate.fakes.script("resume_progress", ResumeProgress(running=True, worker=worker(1)))
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == [*["place_and_restore"] * 4, "resume_progress"]
    assert result.worker == worker(1) and not result.already_running


async def test_a_failure_before_anything_was_placed_is_raised_with_nothing_to_undo(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", fail("Timeout", "the step place_and_restore got no answer in time"))
    ate.fakes.script("resume_progress", ResumeProgress(running=False))
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == ("Timeout", "the step place_and_restore got no answer in time")
    assert ate.fakes.names() == ["place_and_restore", "resume_progress"]


async def test_a_call_that_fails_once_is_retried_and_the_resume_succeeds(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting"), DONE)
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    calls = [call for call in ate.fakes.calls if call.name == "place_and_restore"]
    assert [call.attempt for call in calls] == [1, 2]
    assert calls[0].input == calls[1].input  # the same operation ID: placement and atelet dedupe the retry
    assert ate.fakes.names() == ["place_and_restore", "place_and_restore"]
    assert result.worker == worker(1)


async def test_a_placement_that_conflicts_once_is_retried(ate: Ate) -> None:
    conflict = store_failure(VersionConflict("actor demo/c1 changed meanwhile"))
    ate.fakes.script("place_and_restore", conflict, DONE)
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert [call.attempt for call in ate.fakes.calls if call.name == "place_and_restore"] == [1, 2]
    assert result.restored_generation == 3


PINNED_FULL = "actor demo/c1 is PAUSED on node node-a, which has no room; other nodes do"
LOCAL = snapshot(4, local=True, manifest=MANIFEST)
UPLOADED = snapshot(4)
DETACH_PLAN = SuspendPlan(already_suspended=False, snapshot=UPLOADED, upload_from=LOCAL, atelet_address=ATELET)


async def test_a_paused_actor_on_a_full_node_is_uploaded_then_placed_elsewhere(ate: Ate) -> None:
    elsewhere = ResumePlan(already_running=False, worker=worker(2, node="node-b"), snapshot=UPLOADED, spec=SPEC)
    ate.fakes.script("place_and_restore", store_failure(PinnedNodeFull(PINNED_FULL)))
    ate.fakes.script("begin_resume", elsewhere).script("begin_suspend", DETACH_PLAN)
    ate.fakes.script("atelet_copy_snapshot", AteletCheckpointResult(manifest=MANIFEST, size_bytes=4096))
    ate.fakes.script("complete_suspend", None).script("atelet_start", MARKED)
    result = await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    op = ate.run_id
    assert ate.fakes.names() == [
        "place_and_restore",
        "begin_suspend",
        "atelet_copy_snapshot",
        "complete_suspend",
        "begin_resume",
        "atelet_start",
    ]
    detach = f"{op}/detach"
    assert ate.fakes.inputs("begin_suspend") == [BeginSuspendInput(actor=C1, operation_id=detach)]
    assert ate.fakes.inputs("atelet_copy_snapshot") == [
        AteletCopyInput(operation_id=detach, atelet_address=ATELET, source=LOCAL, destination=UPLOADED)
    ]
    assert ate.fakes.inputs("complete_suspend") == [
        CompleteSnapshotInput(
            actor=C1, operation_id=detach, snapshot_id=UPLOADED.snapshot_id, manifest=MANIFEST, size_bytes=4096
        )
    ]
    assert ate.fakes.inputs("begin_resume") == [BeginResumeInput(actor=C1, operation_id=op)]
    assert ate.fakes.inputs("atelet_start") == [
        AteletRunInput(
            operation_id=op,
            worker=worker(2, node="node-b"),
            holder=C1,
            spec=SPEC,
            snapshot=UPLOADED,
            probe_timeout_seconds=30.0,
            mark_running=True,
        )
    ]
    assert result.worker == worker(2, node="node-b") and result.restored_generation == 4
    assert "detach" in result.timings


async def test_a_failed_detach_keeps_the_actor_paused_and_places_nothing(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", store_failure(PinnedNodeFull(PINNED_FULL)))
    ate.fakes.script("begin_suspend", DETACH_PLAN)
    gone = "local snapshot local:///demo/actors/c1/4-op is not on this node"
    ate.fakes.script("atelet_copy_snapshot", atelet_failure(grpc.StatusCode.NOT_FOUND, gone, "CopySnapshot"))
    ate.fakes.script("rollback_suspend", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    cause = f"while calling atelet CopySnapshot on 127.0.0.1:8085: {gone}"
    assert failure.type == "AteletNotFound"
    assert failure.message == (
        f"actor demo/c1's node {NODE} is full and its paused snapshot could not be moved off it; it stays PAUSED: {cause}"
    )
    assert ate.fakes.names() == ["place_and_restore", "begin_suspend", "atelet_copy_snapshot", "rollback_suspend"]
    assert ate.fakes.inputs("rollback_suspend") == [
        CompleteSnapshotInput(
            actor=C1,
            operation_id=f"{ate.run_id}/detach",
            snapshot_id=UPLOADED.snapshot_id,
            manifest={"error": cause},
            size_bytes=0,
        )
    ]


async def test_a_detach_that_finds_the_actor_no_longer_paused_goes_straight_to_placement(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", store_failure(PinnedNodeFull(PINNED_FULL)))
    ate.fakes.script("begin_resume", PLAN).script("atelet_start", MARKED)
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=True))
    await ate.execute(RUN, ResumeActorInput(actor=C1), id=ID)
    assert ate.fakes.names() == ["place_and_restore", "begin_suspend", "begin_resume", "atelet_start"]


async def test_after_a_detach_a_failed_restore_is_rolled_back_unless_it_had_marked_the_actor_running(
    ate: Ate,
) -> None:
    ate.fakes.script("place_and_restore", store_failure(PinnedNodeFull(PINNED_FULL)))
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=True)).script("begin_resume", PLAN)
    ate.fakes.script("atelet_start", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, PROBE_NEVER_ANSWERED))
    ate.fakes.script("resume_finished", False).script("atelet_terminate", True).script("rollback_resume", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert failure.message.startswith("resume of actor demo/c1 failed and was rolled back: ")
    assert ate.fakes.names()[-4:] == ["atelet_start", "resume_finished", "atelet_terminate", "rollback_resume"]


async def test_after_a_detach_a_superseded_restore_is_not_rolled_back(ate: Ate) -> None:
    ate.fakes.script("place_and_restore", store_failure(PinnedNodeFull(PINNED_FULL)))
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=True)).script("begin_resume", PLAN)
    ate.fakes.script("atelet_start", fail("Superseded", "the placement of actor/demo/c1 on worker 1 was taken over"))
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert (failure.type, failure.message) == (
        "Superseded",
        "the placement of actor/demo/c1 on worker 1 was taken over",
    )
    assert ate.fakes.names() == ["place_and_restore", "begin_suspend", "begin_resume", "atelet_start"]


async def test_a_thaw_that_fails_goes_back_to_frozen_without_terminating_the_sandbox(ate: Ate) -> None:
    # The frozen sandbox holds the actor's memory: a failed thaw must not throw it away.
    refused = atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "cgroup freezer busy")
    ate.fakes.script("place_and_restore", refused)
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=worker(1), thaw=True))
    ate.fakes.script("rollback_thaw", None)
    failure = await ate.failure(RUN, ResumeActorInput(actor=C1), id=ID)
    assert "cgroup freezer busy" in failure.message
    assert ate.fakes.names() == ["place_and_restore", "resume_progress", "rollback_thaw"]  # no atelet_terminate
    [rollback] = ate.fakes.inputs("rollback_thaw")
    assert rollback.error is not None and "cgroup freezer busy" in rollback.error
