"""SnapshotGarbageCollection (workflows/snapshot_gc.py): a round deletes the batch it lists and the
collector waits `interval_seconds`; the `collect_now` signal starts a round at once, without the
minimum age; a full batch is followed by another round at once; a failed delete does not stop
the round; continue-as-new after `rounds_before_continue_as_new` rounds.

The collector never ends, so these tests drive it (signals, `env.sleep` to skip time) and read
its history instead of awaiting its result; time skips only while a test waits on the server.
"""

from __future__ import annotations

import grpc
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from domain.operations.snapshot_gc import DeleteSnapshotInput, GarbageSnapshot, SnapshotGcInput
from domain.states import SnapshotStorage
from domain.temporal import SNAPSHOT_GC_WORKFLOW_ID
from tests.workflows.fakes import atelet_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import NODE
from workflows.snapshot_gc import SnapshotGarbageCollectionWorkflow

RUN = SnapshotGarbageCollectionWorkflow.run
ID = SNAPSHOT_GC_WORKFLOW_ID
REQUEST = SnapshotGcInput(batch=100, min_age_seconds=60.0, interval_seconds=60.0)


def garbage(generation: int, *, local: bool = False) -> GarbageSnapshot:
    if local:
        uri = f"local:///demo/actors/c1/{generation}-op"
        return GarbageSnapshot(100 + generation, uri, "demo/actors/c1", generation, SnapshotStorage.LOCAL, NODE)
    return GarbageSnapshot(
        100 + generation, f"file:///snapshots/demo/actors/c1/{generation}", "demo/actors/c1", generation
    )


async def event_types(ate: Ate) -> list[EventType.ValueType]:
    history = await ate.started[-1].fetch_history()
    return [event.event_type for event in history.events]


async def deleted_after_round(ate: Ate, rounds: int) -> int:
    """The collector's count once its first `rounds` rounds are over: a `collect_now` starts
    the next one, and by its listing the earlier rounds' deletes are all counted. (The signal is
    sent once round `rounds` has listed, i.e. has read the flag: an earlier one would be taken
    by that round instead.)"""
    handle = ate.started[-1]
    await ate.fakes.wait_for("garbage_snapshots", rounds)
    await handle.signal(SnapshotGarbageCollectionWorkflow.collect_now)
    await ate.fakes.wait_for("garbage_snapshots", rounds + 1)
    count: int = await handle.query(SnapshotGarbageCollectionWorkflow.deleted_count)
    return count


async def test_a_round_deletes_the_batch_then_the_collector_waits_for_the_interval(ate: Ate) -> None:
    batch = [garbage(1), garbage(2, local=True)]
    ate.fakes.script("garbage_snapshots", batch, []).script("delete_snapshot", True)
    handle = await ate.start(RUN, REQUEST, id=ID)
    await ate.fakes.wait_for("delete_snapshot", 2)
    assert ate.fakes.names() == ["garbage_snapshots", "delete_snapshot", "delete_snapshot"]
    assert ate.fakes.inputs("garbage_snapshots") == [REQUEST]
    assert ate.fakes.inputs("delete_snapshot") == [DeleteSnapshotInput(snapshot=s) for s in batch]
    # Idle: nothing more happens until the interval has passed in workflow time.
    await ate.env.sleep(59)
    assert ate.fakes.names().count("garbage_snapshots") == 1
    await ate.env.sleep(2)
    await ate.fakes.wait_for("garbage_snapshots", 2)
    assert ate.fakes.inputs("garbage_snapshots")[1] == REQUEST  # with the minimum age again
    assert await handle.query(SnapshotGarbageCollectionWorkflow.deleted_count) == 2


async def test_collect_now_starts_a_round_at_once_without_the_minimum_age(ate: Ate) -> None:
    ate.fakes.script("garbage_snapshots", [], [garbage(3)], []).script("delete_snapshot", True)
    handle = await ate.start(RUN, REQUEST, id=ID)
    await ate.fakes.wait_for("garbage_snapshots")
    await handle.signal(SnapshotGarbageCollectionWorkflow.collect_now)
    (_, urgent) = await ate.fakes.wait_for("garbage_snapshots", 2)
    assert urgent == SnapshotGcInput(batch=100, min_age_seconds=0.0, interval_seconds=60.0)
    assert await deleted_after_round(ate, 2) == 1
    # At once: the second round came from the signal, not from the interval's timer.
    events = await event_types(ate)
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED in events
    assert EventType.EVENT_TYPE_TIMER_FIRED not in events


async def test_a_full_batch_is_followed_by_another_round_at_once(ate: Ate) -> None:
    ate.fakes.script("garbage_snapshots", [garbage(1), garbage(2)], [garbage(3)], []).script("delete_snapshot", True)
    await ate.start(RUN, SnapshotGcInput(batch=2, interval_seconds=60.0), id=ID)
    await ate.fakes.wait_for("delete_snapshot", 3)
    assert ate.fakes.names() == [
        "garbage_snapshots",
        "delete_snapshot",
        "delete_snapshot",
        "garbage_snapshots",
        "delete_snapshot",
    ]
    events = await event_types(ate)  # the second round came neither from a timer nor from a signal
    assert EventType.EVENT_TYPE_TIMER_FIRED not in events
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in events
    assert await deleted_after_round(ate, 2) == 3


async def test_a_snapshot_that_cannot_be_deleted_does_not_stop_the_round(ate: Ate) -> None:
    refused = atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "snapshot in use", "DeleteSnapshot")
    ate.fakes.script("garbage_snapshots", [garbage(1), garbage(2)], []).script("delete_snapshot", refused, True)
    await ate.start(RUN, REQUEST, id=ID)
    assert await deleted_after_round(ate, 1) == 1
    assert [i.snapshot for i in ate.fakes.inputs("delete_snapshot")] == [garbage(1), garbage(2)]


async def test_a_delete_that_fails_once_is_retried(ate: Ate) -> None:
    unavailable = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "DeleteSnapshot")
    ate.fakes.script("garbage_snapshots", [garbage(1)], []).script("delete_snapshot", unavailable, True)
    await ate.start(RUN, REQUEST, id=ID)
    assert await deleted_after_round(ate, 1) == 1
    assert [c.attempt for c in ate.fakes.calls if c.name == "delete_snapshot"] == [1, 2]


async def test_the_collector_continues_as_new_after_its_rounds(ate: Ate) -> None:
    ate.fakes.script("garbage_snapshots", [])
    handle = await ate.start(RUN, SnapshotGcInput(interval_seconds=60.0, rounds_before_continue_as_new=2), id=ID)
    await ate.fakes.wait_for("garbage_snapshots", 1)
    await ate.env.sleep(61)
    await ate.fakes.wait_for("garbage_snapshots", 2)
    await ate.env.sleep(61)
    await ate.fakes.wait_for("garbage_snapshots", 3)  # the first round of the new run
    first = ate.client.get_workflow_handle(ID, run_id=handle.first_execution_run_id)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    latest = await ate.client.get_workflow_handle(ID).describe()
    assert latest.status == WorkflowExecutionStatus.RUNNING and latest.run_id != handle.first_execution_run_id
    assert ate.fakes.inputs("garbage_snapshots")[2] == SnapshotGcInput(
        interval_seconds=60.0, rounds_before_continue_as_new=2, rounds=0
    )
