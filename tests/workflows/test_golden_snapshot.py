"""GoldenSnapshot (workflows/golden_snapshot.py): boot, probe, checkpoint FULL; every worker busy is
waited out up to `placement_wait_seconds`; a failed boot or checkpoint is cleaned up and the
template marked Failed with the reason; a recreated template (Superseded); a retried checkpoint."""

from __future__ import annotations

import grpc

from domain.operations.atelet_calls import (
    AteletCheckpointInput,
    AteletCheckpointResult,
    AteletRunInput,
    AteletRunResult,
    AteletTerminateInput,
)
from domain.operations.common import FinishInput
from domain.operations.golden import GoldenPlan, GoldenSnapshotInput
from domain.operations.suspend import CompleteSnapshotInput
from domain.refs import ActorRef
from store import NoCapacity, NoMatchingWorker
from tests.workflows.fakes import atelet_failure, fail, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import MANIFEST, SPEC, snapshot, worker
from workflows.golden_snapshot import GoldenSnapshotWorkflow

RUN = GoldenSnapshotWorkflow.run
ID = "template/demo/counter"
REQUEST = GoldenSnapshotInput(
    atespace="demo", template="counter", probe_timeout_seconds=60.0, placement_wait_seconds=600.0
)
TEMPLATE = ActorRef(atespace="demo", name="counter")
HOLDER = ActorRef(atespace="demo", name="golden-counter")
GOLDEN = snapshot(1, owner="demo/templates/counter")
PLAN = GoldenPlan(worker=worker(1), snapshot=GOLDEN, spec=SPEC)
BOOTED = AteletRunResult(worker_ip="10.88.0.2", timings={"boot": 1.5})
CHECKPOINTED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=65536)
BUSY = "no worker has room for the template demo/counter: all 2 matching workers have every place taken"
PROBE = "wakeup probe GET :8080/readyz of container counter got no answer within 60 s"


def script_happy(ate: Ate) -> None:
    ate.fakes.script("begin_golden", PLAN).script("atelet_start", BOOTED).script("atelet_checkpoint", CHECKPOINTED)
    ate.fakes.script("complete_golden", None)


async def test_a_template_is_booted_once_and_checkpointed_full(ate: Ate) -> None:
    script_happy(ate)
    result = await ate.execute(RUN, REQUEST, id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_golden", "atelet_start", "atelet_checkpoint", "complete_golden"]
    assert ate.fakes.inputs("begin_golden") == [REQUEST]
    assert ate.fakes.inputs("atelet_start") == [
        AteletRunInput(
            operation_id=op,
            worker=worker(1),
            holder=HOLDER,
            spec=SPEC,
            snapshot=None,
            probe_timeout_seconds=60.0,
            placement=ID,
            template=REQUEST.template,  # the label of the golden boot's output
            golden=True,  # its output is the golden snapshot's, not shipped
        )
    ]
    assert ate.fakes.inputs("atelet_checkpoint") == [
        AteletCheckpointInput(operation_id=op, worker=worker(1), holder=HOLDER, snapshot=GOLDEN, placement=ID)
    ]
    assert ate.fakes.inputs("complete_golden") == [
        CompleteSnapshotInput(
            actor=TEMPLATE, operation_id=op, snapshot_id=GOLDEN.snapshot_id, manifest=MANIFEST, size_bytes=65536
        )
    ]
    assert (result.phase, result.snapshot_id, result.reason) == ("Ready", GOLDEN.snapshot_id, None)


async def test_every_worker_busy_is_waited_out_and_the_boot_goes_ahead(ate: Ate) -> None:
    script_happy(ate)
    busy = store_failure(NoCapacity(BUSY))
    ate.fakes.script("begin_golden", busy, busy, busy, PLAN)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert result.phase == "Ready"
    assert ate.fakes.names() == [*["begin_golden"] * 4, "atelet_start", "atelet_checkpoint", "complete_golden"]
    pauses = await ate.timers()
    assert len(pauses) == 3 and all(pause > 0 for pause in pauses)


async def test_no_worker_within_the_placement_wait_fails_the_template_with_the_reason(ate: Ate) -> None:
    ate.fakes.script("begin_golden", store_failure(NoCapacity(BUSY))).script("fail_golden", None)
    result = await ate.execute(
        RUN, GoldenSnapshotInput(atespace="demo", template="counter", placement_wait_seconds=30.0), id=ID
    )
    assert (result.phase, result.reason) == ("Failed", BUSY)
    assert ate.fakes.names()[-1] == "fail_golden"
    assert set(ate.fakes.names()[:-1]) == {"begin_golden"}
    assert ate.fakes.inputs("fail_golden") == [FinishInput(actor=TEMPLATE, operation_id=ate.run_id, error=BUSY)]
    waited = sum(await ate.timers())
    assert 30.0 <= waited <= 35.0  # the whole placement wait (in skipped time), and no more than one pause beyond


async def test_a_template_no_worker_can_ever_take_fails_at_once(ate: Ate) -> None:
    never = "no worker can run the template demo/counter: no worker pool has the labels gpu=a100"
    ate.fakes.script("begin_golden", store_failure(NoMatchingWorker(never))).script("fail_golden", None)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert (result.phase, result.reason) == ("Failed", never)
    assert ate.fakes.names() == ["begin_golden", "fail_golden"]
    assert await ate.timers() == []


async def test_a_boot_that_never_wakes_up_is_terminated_and_the_template_fails_with_the_reason(ate: Ate) -> None:
    ate.fakes.script("begin_golden", PLAN).script("atelet_terminate", True).script("fail_golden", None)
    ate.fakes.script("atelet_start", atelet_failure(grpc.StatusCode.FAILED_PRECONDITION, PROBE, "Run"))
    result = await ate.execute(RUN, REQUEST, id=ID)
    op = ate.run_id
    reason = f"while calling atelet Run on 127.0.0.1:8085: {PROBE}"
    assert (result.phase, result.reason) == ("Failed", reason)
    assert ate.fakes.names() == ["begin_golden", "atelet_start", "atelet_terminate", "fail_golden"]
    assert ate.fakes.inputs("atelet_terminate") == [
        AteletTerminateInput(operation_id=op, worker=worker(1), holder=HOLDER)
    ]
    assert ate.fakes.inputs("fail_golden") == [FinishInput(actor=TEMPLATE, operation_id=op, error=reason)]


async def test_a_failed_checkpoint_is_cleaned_up_even_when_the_terminate_fails_too(ate: Ate) -> None:
    ate.fakes.script("begin_golden", PLAN).script("atelet_start", BOOTED).script("fail_golden", None)
    ate.fakes.script(
        "atelet_checkpoint", atelet_failure(grpc.StatusCode.INTERNAL, "runsc checkpoint: exit 1", "Checkpoint")
    )
    ate.fakes.script("atelet_terminate", atelet_failure(grpc.StatusCode.NOT_FOUND, "no such sandbox", "Terminate"))
    result = await ate.execute(RUN, REQUEST, id=ID)
    # INTERNAL is retried (4 attempts in all); the template then fails with the checkpoint's reason.
    assert ate.fakes.names() == [
        "begin_golden",
        "atelet_start",
        *["atelet_checkpoint"] * 4,
        "atelet_terminate",
        "fail_golden",
    ]
    assert (result.phase, result.reason) == (
        "Failed",
        "while calling atelet Checkpoint on 127.0.0.1:8085: runsc checkpoint: exit 1",
    )


async def test_a_recreated_template_supersedes_the_boot(ate: Ate) -> None:
    ate.fakes.script("begin_golden", PLAN)
    ate.fakes.script("atelet_start", fail("Superseded", "the placement template/demo/counter was taken over"))
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert (result.phase, result.reason) == ("Superseded", "the placement template/demo/counter was taken over")
    assert ate.fakes.names() == ["begin_golden", "atelet_start"]


async def test_a_checkpoint_that_fails_once_is_retried_and_the_template_is_ready(ate: Ate) -> None:
    script_happy(ate)
    ate.fakes.script(
        "atelet_checkpoint",
        atelet_failure(grpc.StatusCode.UNAVAILABLE, "atelet restarting", "Checkpoint"),
        CHECKPOINTED,
    )
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert result.phase == "Ready"
    assert [c.attempt for c in ate.fakes.calls if c.name == "atelet_checkpoint"] == [1, 2]
    assert ate.fakes.names() == [
        "begin_golden",
        "atelet_start",
        "atelet_checkpoint",
        "atelet_checkpoint",
        "complete_golden",
    ]
