"""UploadSnapshot (workflows/upload_snapshot.py): reserve, copy, record; an upload no longer needed;
an actor that moved on; failures retried `attempts` times with a doubling pause, then the
reservation abandoned; copy failures no retry can fix."""

from __future__ import annotations

import grpc
import pytest

from domain.operations.atelet_calls import AteletCheckpointResult, AteletCopyInput
from domain.operations.upload import CompleteUploadInput, UploadInput, UploadPlan, UploadSnapshotInput
from domain.temporal import upload_workflow_id
from store import NotFound
from tests.workflows.fakes import atelet_failure, store_failure
from tests.workflows.harness import Ate
from tests.workflows.samples import ATELET, C1, MANIFEST, snapshot
from workflows.upload_snapshot import UploadSnapshotWorkflow

RUN = UploadSnapshotWorkflow.run
LOCAL = snapshot(4, local=True, manifest=MANIFEST)
DESTINATION = snapshot(4)
ID = upload_workflow_id("demo", "c1", LOCAL.snapshot_id)
REQUEST = UploadSnapshotInput(actor=C1, local_snapshot_id=LOCAL.snapshot_id, attempts=4, retry_seconds=2.0)
PLAN = UploadPlan(needed=True, source=LOCAL, destination=DESTINATION, atelet_address=ATELET)
COPIED = AteletCheckpointResult(manifest=MANIFEST, size_bytes=8192)
# what grpc says when nothing listens at the atelet's address (seen with a closed port)
UNREACHABLE = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8085: Failed to connect to remote host: "
    "Connection refused"
)


async def test_the_local_snapshot_is_copied_and_recorded_as_the_latest(ate: Ate) -> None:
    ate.fakes.script("begin_upload", PLAN).script("atelet_copy_snapshot", COPIED).script("complete_upload", True)
    result = await ate.execute(RUN, REQUEST, id=ID)
    op = ate.run_id
    assert ate.fakes.names() == ["begin_upload", "atelet_copy_snapshot", "complete_upload"]
    assert ate.fakes.inputs("begin_upload") == [
        UploadInput(actor=C1, operation_id=op, local_snapshot_id=LOCAL.snapshot_id)
    ]
    assert ate.fakes.inputs("atelet_copy_snapshot") == [
        AteletCopyInput(operation_id=op, atelet_address=ATELET, source=LOCAL, destination=DESTINATION)
    ]
    assert ate.fakes.inputs("complete_upload") == [
        CompleteUploadInput(
            actor=C1,
            operation_id=op,
            local_snapshot_id=LOCAL.snapshot_id,
            snapshot_id=DESTINATION.snapshot_id,
            manifest=MANIFEST,
            size_bytes=8192,
        )
    ]
    assert (result.generation, result.skipped) == (4, None)


async def test_a_snapshot_resumed_or_dropped_meanwhile_is_not_uploaded(ate: Ate) -> None:
    ate.fakes.script("begin_upload", UploadPlan(needed=False)).script("abandon_upload", None)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert ate.fakes.names() == ["begin_upload", "abandon_upload"]
    assert (result.generation, result.skipped) == (None, "the local snapshot was resumed or dropped")


async def test_an_upload_that_lands_after_the_actor_moved_on_is_left_to_the_gc(ate: Ate) -> None:
    ate.fakes.script("begin_upload", PLAN).script("atelet_copy_snapshot", COPIED).script("complete_upload", False)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert ate.fakes.names() == ["begin_upload", "atelet_copy_snapshot", "complete_upload"]
    assert (result.generation, result.skipped) == (None, "the actor had moved on before the upload landed")


async def test_a_failed_copy_is_retried_after_a_doubling_pause_and_then_lands(ate: Ate) -> None:
    unreachable = atelet_failure(grpc.StatusCode.UNAVAILABLE, UNREACHABLE, "CopySnapshot", unreachable=True)
    # Each attempt's atelet call is itself retried (4 calls) before the workflow pauses.
    ate.fakes.script("begin_upload", PLAN).script("atelet_copy_snapshot", *[unreachable] * 8, COPIED)
    ate.fakes.script("complete_upload", True)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert result.generation == 4
    assert await ate.timers() == [2.0, 4.0]
    assert ate.fakes.names().count("begin_upload") == 3
    assert ate.fakes.names().count("atelet_copy_snapshot") == 9
    assert ate.fakes.names()[-1] == "complete_upload"


async def test_a_reservation_that_fails_is_retried_after_a_pause(ate: Ate) -> None:
    gone = store_failure(NotFound("actor demo/c1 not found"))
    ate.fakes.script("begin_upload", gone, PLAN).script("atelet_copy_snapshot", COPIED).script("complete_upload", True)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert result.generation == 4
    assert await ate.timers() == [2.0]
    assert ate.fakes.names() == ["begin_upload", "begin_upload", "atelet_copy_snapshot", "complete_upload"]


def script_always_unreachable(ate: Ate) -> None:
    unreachable = atelet_failure(grpc.StatusCode.UNAVAILABLE, UNREACHABLE, "CopySnapshot", unreachable=True)
    ate.fakes.script("begin_upload", PLAN).script("atelet_copy_snapshot", unreachable).script("abandon_upload", None)


async def test_after_every_attempt_failed_the_reservation_is_abandoned(ate: Ate) -> None:
    script_always_unreachable(ate)
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert result.generation is None
    assert result.skipped == (
        "upload failed: the atelet at 127.0.0.1:8085 did not answer the CopySnapshot call (Connection refused): the "
        "node's agent is down or restarting"
    )
    names = ate.fakes.names()
    assert names.count("begin_upload") == 4  # `attempts` tries...
    assert names.count("atelet_copy_snapshot") == 4 * 4
    assert names[-1] == "abandon_upload" and names.count("abandon_upload") == 1  # ...then the row is dropped
    assert ate.fakes.inputs("abandon_upload") == [
        UploadInput(actor=C1, operation_id=ate.run_id, local_snapshot_id=LOCAL.snapshot_id)
    ]


async def test_the_tries_are_retry_seconds_apart_doubling_and_the_last_failure_gives_up_at_once(ate: Ate) -> None:
    """UploadSnapshotInput: "give up after `attempts` tries `retry_seconds` apart (doubling)":
    4 tries have 3 pauses between them, and nothing to wait for after the last."""
    script_always_unreachable(ate)
    await ate.execute(RUN, REQUEST, id=ID)
    assert await ate.timers() == [2.0, 4.0, 8.0]


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (grpc.StatusCode.NOT_FOUND, "local snapshot local:///demo/actors/c1/4-op is not on this node"),
        # the local copy's files do not match its manifest (the atelet's DATA_LOSS)
        (grpc.StatusCode.DATA_LOSS, "source_uri: 'local:///demo/actors/c1/4-op': snapshot file ram: sha256 1 != manifest 2"),
    ],
)
async def test_a_copy_no_retry_can_fix_abandons_at_once(ate: Ate, code: grpc.StatusCode, why: str) -> None:
    ate.fakes.script("begin_upload", PLAN).script("abandon_upload", None)
    ate.fakes.script("atelet_copy_snapshot", atelet_failure(code, why, "CopySnapshot"))
    result = await ate.execute(RUN, REQUEST, id=ID)
    assert ate.fakes.names() == ["begin_upload", "atelet_copy_snapshot", "abandon_upload"]
    assert result.skipped == f"upload failed: while calling atelet CopySnapshot on 127.0.0.1:8085: {why}"
    assert await ate.timers() == []
