"""SnapshotGarbageCollection: deletes snapshots nothing needs any more, forever, in rounds.

A snapshot is garbage when no actor has it as latest or in progress, no tag points at it, no
template uses it as golden, and either its owner (actor or template) is gone or a newer
COMPLETED generation of the same owner exists. Each round deletes a batch (data through an
atelet, then the row), then sleeps; the `collect_now` signal starts a round at once, without
the minimum age. One instance runs, workflow ID `snapshot-gc`, started by every worker at boot.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.steps import atelet_step, db_step, show_step

with workflow.unsafe.imports_passed_through():
    from domain.activity_names import Activity
    from domain.operations.snapshot_gc import DeleteSnapshotInput, GarbageSnapshot, SnapshotGcInput

@workflow.defn(name="SnapshotGarbageCollection")
class SnapshotGarbageCollectionWorkflow:
    """Delete unreferenced snapshots in rounds; continue-as-new keeps the history short."""

    def __init__(self) -> None:
        self._now = False
        self.deleted = 0

    @workflow.signal
    def collect_now(self) -> None:
        """Run a round now, ignoring the minimum age."""
        self._now = True

    @workflow.query
    def deleted_count(self) -> int:
        """Snapshots deleted by this run."""
        return self.deleted

    @workflow.run
    async def run(self, request: SnapshotGcInput) -> None:
        """Collect forever."""
        rounds = request.rounds
        while rounds < request.rounds_before_continue_as_new:
            urgent = self._now
            self._now = False
            query = replace(request, min_age_seconds=0.0) if urgent else request
            show_step("listing garbage")
            batch: list[GarbageSnapshot] = await db_step(Activity.GARBAGE_SNAPSHOTS, query, list[GarbageSnapshot])
            for snapshot in batch:
                show_step(f"deleting {snapshot.owner} generation {snapshot.generation}")
                try:
                    await atelet_step(Activity.DELETE_SNAPSHOT, DeleteSnapshotInput(snapshot=snapshot), bool)
                    self.deleted += 1
                except ApplicationError as error:
                    workflow.logger.warning("could not delete snapshot %s: %s", snapshot.uri, error)
            rounds += 1
            if len(batch) >= request.batch:
                continue
            show_step(f"idle: {self.deleted} deleted so far")
            try:
                await workflow.wait_condition(lambda: self._now, timeout=timedelta(seconds=request.interval_seconds))
            except TimeoutError:
                pass
        workflow.continue_as_new(replace(request, rounds=0))
