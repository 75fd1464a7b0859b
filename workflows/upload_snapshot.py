"""UploadSnapshot: the background half of an async suspend.

SuspendActor in mode async checkpoints the actor onto its node (a LOCAL snapshot), marks it
SUSPENDED pinned to that node, starts this workflow and returns. This workflow copies the local
snapshot to the template's storage location through the node's atelet and then makes the copy
the actor's latest snapshot, which unpins it (ARCHITECTURE.md, "Workflows").

It holds no per-actor lock (workflow ID `upload/<atespace>/<name>/<local snapshot id>`): the
actor stays usable meanwhile. A resume restores the local copy (the upload then only records
the copy if the actor still waits for it); a revert drops it. Each step is idempotent:
`begin_upload` reserves the destination once per run, the atelet's CopySnapshot returns an
existing identical copy, `complete_upload` is a guarded update.

Failures (the node unreachable, a copy error) are retried `attempts` times with a doubling
pause; then the reserved row is dropped and the actor stays pinned to its node, where a resume
still restores it and `ate revert` drops it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import atelet_step, db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.atelet_calls import AteletCheckpointResult, AteletCopyInput
    from domain.operations.upload import (
        CompleteUploadInput,
        UploadInput,
        UploadPlan,
        UploadSnapshotInput,
        UploadSnapshotResult,
    )
    from domain.reasons import Reason
    from domain.states import Operation

NO_PAUSE_AFTER_LAST_ATTEMPT = "upload-no-pause-after-last-attempt"
"""The patch ID of the fix that gives up right after the last failed attempt."""

FINAL_COPY_FAILURES = frozenset(
    {Reason.ATELET_NOT_FOUND, Reason.ATELET_FAILED_PRECONDITION, Reason.ATELET_DATA_LOSS, Reason.ATELET_INVALID_ARGUMENT}
)
"""Copy failures no retry can fix: the local snapshot is gone or does not match its manifest."""


@workflow.defn(name=Operation.UPLOAD.value)
class UploadSnapshotWorkflow:
    """Upload an async suspend's local snapshot and make it the actor's latest."""

    @workflow.run
    async def run(self, request: UploadSnapshotInput) -> UploadSnapshotResult:
        """Copy, then record; see the module docstring for retries and what is skipped."""
        actor = request.actor
        step = UploadInput(
            actor=actor, operation_id=workflow.info().run_id, local_snapshot_id=request.local_snapshot_id
        )
        pause = request.retry_seconds
        last_error = "no attempt made"
        for attempt in range(1, request.attempts + 1):
            show_step(f"reserve (attempt {attempt})")
            try:
                plan: UploadPlan = await db_step(Activity.BEGIN_UPLOAD, step, UploadPlan)
            except ApplicationError as error:
                last_error = error.message
                await self._wait(attempt, request.attempts, pause, last_error)
                pause *= 2
                continue
            if not plan.needed:
                show_step("not needed: the local snapshot was resumed or dropped")
                await db_step(Activity.ABANDON_UPLOAD, step)
                return UploadSnapshotResult(actor=actor, skipped="the local snapshot was resumed or dropped")
            assert plan.source is not None and plan.destination is not None and plan.atelet_address is not None
            show_step(f"upload from node {plan.source.node} (attempt {attempt})")
            try:
                done: AteletCheckpointResult = await atelet_step(
                    Activity.ATELET_COPY_SNAPSHOT,
                    AteletCopyInput(
                        operation_id=step.operation_id,
                        atelet_address=plan.atelet_address,
                        source=plan.source,
                        destination=plan.destination,
                    ),
                    AteletCheckpointResult,
                )
            except ApplicationError as error:
                last_error = error.message
                if error.type in FINAL_COPY_FAILURES:
                    break
                await self._wait(attempt, request.attempts, pause, last_error)
                pause *= 2
                continue
            show_step("finalize")
            taken: bool = await db_step(
                Activity.COMPLETE_UPLOAD,
                CompleteUploadInput(
                    actor=actor,
                    operation_id=step.operation_id,
                    local_snapshot_id=request.local_snapshot_id,
                    snapshot_id=plan.destination.snapshot_id,
                    manifest=done.manifest,
                    size_bytes=done.size_bytes,
                ),
                bool,
            )
            show_step("done" if taken else "done: the actor had moved on, the copy is left to the snapshot GC")
            return UploadSnapshotResult(
                actor=actor,
                generation=plan.destination.generation if taken else None,
                skipped=None if taken else "the actor had moved on before the upload landed",
            )
        show_step(f"gave up: {last_error}")
        await db_step(Activity.ABANDON_UPLOAD, step)
        return UploadSnapshotResult(actor=actor, skipped=f"upload failed: {last_error}")

    @staticmethod
    async def _wait(attempt: int, attempts: int, seconds: float, why: str) -> None:
        """The pause before the next attempt; none after the last one (the upload gives up at
        once). Runs recorded before that fix keep their pause on replay (`workflow.patched`)."""
        if attempt >= attempts and workflow.patched(NO_PAUSE_AFTER_LAST_ATTEMPT):
            return
        show_step(f"retry in {seconds:g} s: {why}")
        await workflow.sleep(timedelta(seconds=seconds))
