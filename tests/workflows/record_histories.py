"""Record the histories test_replay.py replays: `.venv/bin/python -m tests.workflows.record_histories`.

Runs one representative execution per entry of SCENARIOS (every workflow, with its branches:
rollbacks, retries, timers, child workflows, signals, continue-as-new) on the time-skipping
test server with the fakes, and writes each history as JSON (the format of `temporal workflow
show --output json`) to tests/workflows/histories/<scenario>.json. Commit the files it writes.

Run it only when a workflow's shape changed on purpose (see test_replay.py); each scenario gets
a test server of its own, so the whole recording takes a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from temporalio.client import WorkflowHandle

from domain.operations.atelet_calls import AteletCheckpointResult, AteletRunResult
from domain.operations.drain import DrainPlan, EvictionDeadlineInput, Leftover
from domain.operations.exec import ExecInput, ExecResult
from domain.operations.freeze import AteletFreezeResult, FreezeActorInput, FreezePlan
from domain.operations.golden import GoldenPlan, GoldenSnapshotInput
from domain.operations.pause import PauseActorInput, PausePlan
from domain.operations.pressure import PressureVictimRef, PressureVictims
from domain.operations.resume import PlaceAndRestoreResult, ResumeActorInput, ResumePlan, ResumeProgress
from domain.operations.revert import RevertActorInput, RevertPlan
from domain.operations.router_drain import RouterDrainResult
from domain.operations.snapshot_gc import GarbageSnapshot, SnapshotGcInput
from domain.operations.suspend import BeginSuspendInput, SuspendActorInput, SuspendPlan
from domain.operations.upload import UploadPlan, UploadSnapshotInput
from domain.schedules import WakeActorInput, WakeActorResult
from domain.temporal import SNAPSHOT_GC_WORKFLOW_ID, template_workflow_id, upload_workflow_id
from store import NoCapacity, NoMatchingWorker, PinnedNodeFull
from tests.workflows.fakes import Fakes, atelet_failure, fail, store_failure
from tests.workflows.harness import Ate, running, start_test_server
from tests.workflows.samples import ATELET, C1, DRAINED, MANIFEST, NODE, SPEC, actor, snapshot, worker
from workflows.eviction_deadline import EvictionDeadlineWorkflow
from workflows.exec_in_actor import ExecInActorWorkflow
from workflows.freeze_actor import FreezeActorWorkflow
from workflows.golden_snapshot import GoldenSnapshotWorkflow
from workflows.pause_actor import PauseActorWorkflow
from workflows.resume_actor import ResumeActorWorkflow
from workflows.revert_actor import RevertActorWorkflow
from workflows.snapshot_gc import SnapshotGarbageCollectionWorkflow
from workflows.suspend_actor import SuspendActorWorkflow
from workflows.upload_snapshot import UploadSnapshotWorkflow
from workflows.wake_actor import WakeActorWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"

Handle = WorkflowHandle[Any, Any]
Scenario = Callable[[Ate], Awaitable[Handle]]

RESTORED = AteletRunResult(worker_ip="10.88.0.2", timings={"restore": 0.25})
MARKED = AteletRunResult(
    worker_ip="10.88.0.2", timings={"restore": 0.25, "finalize": 0.004}, marked_running_at=1_796_000_000.0
)
CHECKPOINTED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=8192, timings={"checkpoint": 0.4})
COMPLETED = AteletCheckpointResult(
    manifest=MANIFEST, size_bytes=8192, timings={"checkpoint": 0.4, "finalize": 0.003}, completed_at=1_796_000_000.0
)
LOCAL = snapshot(4, local=True, manifest=MANIFEST)
RESUME_PLAN = ResumePlan(already_running=False, worker=worker(1), snapshot=snapshot(3, manifest=MANIFEST), spec=SPEC)
UNAVAILABLE = atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting")
PROBE_FAILED = atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "wakeup probe got no answer within 30 s")


async def settled(handle: Handle) -> Handle:
    """Wait until the run closes (successfully or not); its history is then complete."""
    try:
        await handle.result()
    except Exception:
        pass
    return handle


async def resume_restored(ate: Ate) -> Handle:
    ate.fakes.script("place_and_restore", UNAVAILABLE, PlaceAndRestoreResult(plan=RESUME_PLAN, restored=MARKED))
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_finalized_by_the_workflow(ate: Ate) -> Handle:
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=RESUME_PLAN, restored=RESTORED))
    ate.fakes.script("finish_resume", None)
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_marked_then_its_answer_lost(ate: Ate) -> Handle:
    ate.fakes.script("place_and_restore", PROBE_FAILED)
    ate.fakes.script("resume_progress", ResumeProgress(running=True, worker=worker(1)))
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_already_running(ate: Ate) -> Handle:
    plan = ResumePlan(already_running=True, worker=worker(1), spec=SPEC)
    ate.fakes.script("place_and_restore", PlaceAndRestoreResult(plan=plan))
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_rolled_back_and_fenced(ate: Ate) -> Handle:
    ate.fakes.script("place_and_restore", PROBE_FAILED)
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=worker(1)))
    ate.fakes.script("atelet_terminate", UNAVAILABLE).script("fence_worker", None).script("rollback_resume", None)
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_detached_from_full_node(ate: Ate) -> Handle:
    full = store_failure(PinnedNodeFull("actor demo/c1 is PAUSED on node node-a, which has no room"))
    ate.fakes.script("place_and_restore", full).script("begin_resume", RESUME_PLAN).script("atelet_start", MARKED)
    ate.fakes.script(
        "begin_suspend",
        SuspendPlan(already_suspended=False, snapshot=snapshot(4), upload_from=LOCAL, atelet_address=ATELET),
    )
    ate.fakes.script("atelet_copy_snapshot", CHECKPOINTED).script("complete_suspend", None)
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def resume_refused_no_matching_worker(ate: Ate) -> Handle:
    refusal = NoMatchingWorker("no worker could ever take the actor demo/c1: no pool has sandbox class microvm")
    ate.fakes.script("place_and_restore", store_failure(refusal))
    ate.fakes.script("resume_progress", ResumeProgress(running=False, worker=None))  # runs before the fix asked
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def suspend_sync(ate: Ate) -> Handle:
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(4)))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", COMPLETED)
    return await settled(await ate.start(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=C1.workflow_id))


async def suspend_completed_then_its_answer_lost(ate: Ate) -> Handle:
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(4)))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", PROBE_FAILED)
    ate.fakes.script("suspend_completed", True)
    return await settled(await ate.start(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=C1.workflow_id))


async def suspend_async_with_upload(ate: Ate) -> Handle:
    local = snapshot(4, local=True)
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=local))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", CHECKPOINTED).script(
        "complete_suspend", None
    )
    plan = UploadPlan(needed=True, source=LOCAL, destination=snapshot(4), atelet_address=ATELET)
    ate.fakes.script("begin_upload", plan).script("atelet_copy_snapshot", CHECKPOINTED).script("complete_upload", True)
    handle = await ate.start(SuspendActorWorkflow.run, SuspendActorInput(actor=C1, mode="async"), id=C1.workflow_id)
    await settled(handle)
    await settled(ate.client.get_workflow_handle(upload_workflow_id("demo", "c1", local.snapshot_id)))
    return handle


async def suspend_from_paused_rolled_back(ate: Ate) -> Handle:
    plan = SuspendPlan(already_suspended=False, snapshot=snapshot(4), upload_from=LOCAL, atelet_address=ATELET)
    ate.fakes.script("begin_suspend", plan).script("rollback_suspend", None)
    ate.fakes.script("atelet_copy_snapshot", atelet_failure(grpc.StatusCode.NOT_FOUND, "local snapshot gone"))
    return await settled(await ate.start(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=C1.workflow_id))


async def pause(ate: Ate) -> Handle:
    ate.fakes.script("begin_pause", PausePlan(already_paused=False, worker=worker(1), snapshot=snapshot(5, local=True)))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", UNAVAILABLE, CHECKPOINTED).script(
        "complete_pause", None
    )
    return await settled(await ate.start(PauseActorWorkflow.run, PauseActorInput(actor=C1), id=C1.workflow_id))


async def pause_rolled_back(ate: Ate) -> Handle:
    ate.fakes.script("begin_pause", PausePlan(already_paused=False, worker=worker(1), snapshot=snapshot(5, local=True)))
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "no space left")
    )
    ate.fakes.script("rollback_suspend", None)
    return await settled(await ate.start(PauseActorWorkflow.run, PauseActorInput(actor=C1), id=C1.workflow_id))


async def revert_terminated(ate: Ate) -> Handle:
    ate.fakes.script("begin_revert", RevertPlan(from_state="RUNNING", worker=worker(1), node_alive=True))
    ate.fakes.script("atelet_terminate", True).script("drain_routers", DRAINED).script("finish_revert", None)
    return await settled(await ate.start(RevertActorWorkflow.run, RevertActorInput(actor=C1), id=C1.workflow_id))


async def revert_fenced(ate: Ate) -> Handle:
    ate.fakes.script("begin_revert", RevertPlan(from_state="RESUMING", worker=worker(1), node_alive=True))
    ate.fakes.script("atelet_terminate", UNAVAILABLE).script("fence_worker", None)
    ate.fakes.script("drain_routers", DRAINED).script("finish_revert", None)
    return await settled(await ate.start(RevertActorWorkflow.run, RevertActorInput(actor=C1), id=C1.workflow_id))


UPLOAD = UploadSnapshotInput(actor=C1, local_snapshot_id=LOCAL.snapshot_id, attempts=3, retry_seconds=2.0)
UPLOAD_ID = upload_workflow_id("demo", "c1", LOCAL.snapshot_id)


async def upload_retried(ate: Ate) -> Handle:
    plan = UploadPlan(needed=True, source=LOCAL, destination=snapshot(4), atelet_address=ATELET)
    ate.fakes.script("begin_upload", plan).script("atelet_copy_snapshot", *[UNAVAILABLE] * 4, CHECKPOINTED)
    ate.fakes.script("complete_upload", True)
    return await settled(await ate.start(UploadSnapshotWorkflow.run, UPLOAD, id=UPLOAD_ID))


async def upload_abandoned(ate: Ate) -> Handle:
    plan = UploadPlan(needed=True, source=LOCAL, destination=snapshot(4), atelet_address=ATELET)
    ate.fakes.script("begin_upload", plan).script("atelet_copy_snapshot", UNAVAILABLE).script("abandon_upload", None)
    return await settled(await ate.start(UploadSnapshotWorkflow.run, UPLOAD, id=UPLOAD_ID))


GOLDEN = GoldenSnapshotInput(atespace="demo", template="counter")
GOLDEN_PLAN = GoldenPlan(worker=worker(1), snapshot=snapshot(1, owner="demo/templates/counter"), spec=SPEC)


async def golden_after_waiting_for_a_worker(ate: Ate) -> Handle:
    busy = store_failure(NoCapacity("no worker has room for the template demo/counter"))
    ate.fakes.script("begin_golden", busy, busy, GOLDEN_PLAN).script("atelet_start", RESTORED)
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", CHECKPOINTED).script("complete_golden", None)
    return await settled(
        await ate.start(GoldenSnapshotWorkflow.run, GOLDEN, id=template_workflow_id("demo", "counter"))
    )


async def golden_failed_boot(ate: Ate) -> Handle:
    ate.fakes.script("begin_golden", GOLDEN_PLAN).script("atelet_start", PROBE_FAILED)
    ate.fakes.script("atelet_terminate", True).script("fail_golden", None)
    return await settled(
        await ate.start(GoldenSnapshotWorkflow.run, GOLDEN, id=template_workflow_id("demo", "counter"))
    )


async def eviction_deadline(ate: Ate) -> Handle:
    def suspend_plan(request: BeginSuspendInput) -> SuspendPlan:
        return SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(2, owner=request.actor.key))

    ate.fakes.script("begin_suspend", suspend_plan).script("drain_routers", DRAINED).script(
        "atelet_checkpoint", CHECKPOINTED
    )
    ate.fakes.script("complete_suspend", None)
    left = [Leftover(actor=actor("a2"), worker=worker(2)), Leftover(actor=actor("p1"), worker=None)]
    ate.fakes.script("begin_drain", DrainPlan(running=[actor("a1")])).script("drain_leftovers", left)
    ate.fakes.script("atelet_terminate", True).script("crash_after_deadline", None)
    request = EvictionDeadlineInput(node=NODE, deadline_seconds=60.0)
    return await settled(await ate.start(EvictionDeadlineWorkflow.run, request, id=f"node/{NODE}/drain"))


async def snapshot_gc_rounds(ate: Ate) -> Handle:
    batch = [GarbageSnapshot(101, "file:///snapshots/demo/actors/c1/1", "demo/actors/c1", 1)]
    failed = atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, "snapshot in use", "DeleteSnapshot")
    ate.fakes.script("garbage_snapshots", batch, batch, []).script("delete_snapshot", True, failed, True)
    request = SnapshotGcInput(interval_seconds=60.0, rounds_before_continue_as_new=2)
    handle = await ate.start(SnapshotGarbageCollectionWorkflow.run, request, id=SNAPSHOT_GC_WORKFLOW_ID)
    await ate.fakes.wait_for("garbage_snapshots", 1)
    await handle.signal(SnapshotGarbageCollectionWorkflow.collect_now)  # round 2 at once
    await ate.fakes.wait_for("garbage_snapshots", 2)
    await ate.env.sleep(61)  # the interval passes: continue-as-new
    await ate.fakes.wait_for("garbage_snapshots", 3)  # the new run's first round
    return ate.client.get_workflow_handle(SNAPSHOT_GC_WORKFLOW_ID, run_id=handle.first_execution_run_id)


BUSY = RouterDrainResult(drain_id=2, acknowledged=["router-a"], busy=["router-a"], waited_seconds=0.003)


async def freeze(ate: Ate) -> Handle:
    ate.fakes.script("begin_freeze", FreezePlan(already_frozen=False, worker=worker(1)))
    ate.fakes.script("drain_routers", DRAINED).script(
        "atelet_freeze", UNAVAILABLE, AteletFreezeResult(changed=True, seconds=0.004, method="cgroup v1 freezer")
    )
    ate.fakes.script("finish_freeze", None)
    request = FreezeActorInput(actor=C1, reason="idle for 20 s", if_idle=True)
    return await settled(await ate.start(FreezeActorWorkflow.run, request, id=C1.workflow_id))


async def exec_in_actor(ate: Ate) -> Handle:
    ate.fakes.script("begin_exec", worker(1)).script("finish_exec", None)
    ate.fakes.script("atelet_exec", ExecResult(exit_code=0, stdout="2\n", stderr="", stdout_truncated=False,
                                               stderr_truncated=False, ended="", seconds=0.2, worker="default/w-1"))
    request = ExecInput(actor=C1, command=["cat", "/data/count.txt"], timeout_seconds=60, requested_by="alice")
    return await settled(await ate.start(ExecInActorWorkflow.run, request, id="exec/demo/c1/0123456789abcdef"))


async def freeze_abandoned(ate: Ate) -> Handle:
    ate.fakes.script("begin_freeze", FreezePlan(already_frozen=False, worker=worker(1)))
    ate.fakes.script("drain_routers", BUSY).script("rollback_freeze", None)
    request = FreezeActorInput(actor=C1, reason="idle for 20 s", if_idle=True)
    return await settled(await ate.start(FreezeActorWorkflow.run, request, id=C1.workflow_id))


async def suspend_idle_abandoned(ate: Ate) -> Handle:
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(1), snapshot=snapshot(6)))
    ate.fakes.script("drain_routers", BUSY).script("rollback_suspend", None)
    request = SuspendActorInput(actor=C1, reason="idle for 300 s", if_idle=True)
    return await settled(await ate.start(SuspendActorWorkflow.run, request, id=C1.workflow_id))


async def resume_made_room(ate: Ate) -> Handle:
    full = store_failure(NoCapacity("no worker has room for the actor demo/c1: all 1 matching workers have every place taken"))
    ate.fakes.script("place_and_restore", full, PlaceAndRestoreResult(plan=RESUME_PLAN, restored=MARKED))
    victim = PressureVictimRef(actor=actor("idle-1"), action="Suspend", pool="pool-a")
    ate.fakes.script("pressure_victims", PressureVictims([victim]))
    ate.fakes.script("begin_suspend", SuspendPlan(already_suspended=False, worker=worker(2), snapshot=snapshot(7)))
    ate.fakes.script("drain_routers", DRAINED).script("atelet_checkpoint", COMPLETED)
    return await settled(await ate.start(ResumeActorWorkflow.run, ResumeActorInput(actor=C1), id=C1.workflow_id))


async def wake_retried(ate: Ate) -> Handle:
    busy = fail("ApplicationError", "the router answered 503 for demo/c1: no worker has room", retryable=True)
    ate.fakes.script("wake_request", busy, WakeActorResult(status=200, body='{"memory_count":4}'))
    request = WakeActorInput(actor=C1, path="/tick", reason="schedule every-2s")
    return await settled(await ate.start(WakeActorWorkflow.run, request, id="wake/demo/c1/every-2s"))


SCENARIOS: dict[str, Scenario] = {
    "resume_actor_restored_after_a_retry": resume_restored,
    "resume_actor_finalized_by_the_workflow": resume_finalized_by_the_workflow,
    "resume_actor_marked_running_then_its_answer_lost": resume_marked_then_its_answer_lost,
    "resume_actor_already_running": resume_already_running,
    "resume_actor_rolled_back_and_fenced": resume_rolled_back_and_fenced,
    "resume_actor_detached_from_a_full_node": resume_detached_from_full_node,
    "resume_actor_refused_no_matching_worker": resume_refused_no_matching_worker,
    "resume_actor_made_room_under_pressure": resume_made_room,
    "suspend_actor_sync": suspend_sync,
    "suspend_actor_completed_then_its_answer_lost": suspend_completed_then_its_answer_lost,
    "suspend_actor_async_starts_its_upload": suspend_async_with_upload,
    "suspend_actor_from_paused_rolled_back": suspend_from_paused_rolled_back,
    "suspend_actor_idle_abandoned": suspend_idle_abandoned,
    "freeze_actor_after_a_retry": freeze,
    "freeze_actor_idle_abandoned": freeze_abandoned,
    "exec_in_actor_exited": exec_in_actor,
    "pause_actor_after_a_retry": pause,
    "pause_actor_rolled_back": pause_rolled_back,
    "revert_actor_terminated": revert_terminated,
    "revert_actor_fenced": revert_fenced,
    "upload_snapshot_retried_then_landed": upload_retried,
    "upload_snapshot_abandoned": upload_abandoned,
    "golden_snapshot_after_waiting_for_a_worker": golden_after_waiting_for_a_worker,
    "golden_snapshot_failed_boot": golden_failed_boot,
    "eviction_deadline_suspends_then_crashes_leftovers": eviction_deadline,
    "snapshot_gc_rounds_signal_and_continue_as_new": snapshot_gc_rounds,
    "wake_actor_retried_then_answered": wake_retried,
}
"""Scenario name (the history file's stem) -> what runs; each returns the run to record."""


async def record(name: str, scenario: Scenario) -> Path:
    """Run `scenario` on a test server of its own and write its run's history."""
    env = await start_test_server()
    try:
        async with running(env, Fakes()) as ate:
            handle = await scenario(ate)
            history = await handle.fetch_history()
        path = HISTORIES / f"{name}.json"
        path.write_text(history.to_json() + "\n")
        return path
    finally:
        await env.shutdown()


async def main(names: list[str]) -> None:
    """Record the named scenarios (all by default)."""
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    HISTORIES.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        path = await record(name, SCENARIOS[name])
        logging.getLogger("record_histories").info("recorded %s", path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.workflows.record_histories", description=__doc__)
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    names = parser.parse_args().scenarios
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("temporalio").setLevel(logging.ERROR)  # the scripted failures, logged with tracebacks
    asyncio.run(main(names))
    # Everything is written and every worker and server is down; skip the interpreter's
    # finalization, where the SDK's threads now and then abort the process (TEMPORAL.md:
    # "PyGILState_Release"), which would turn a good recording into a failed command.
    sys.stdout.flush()
    os._exit(0)
