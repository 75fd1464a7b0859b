"""Activities that read and write Postgres: every actor state transition of every workflow.

Each is idempotent for its operation ID (see `activities.store.Store`): a retry after a crash
at any point finds the earlier write and returns the same plan.
"""

from __future__ import annotations

from temporalio import activity

from activities.errors import from_store_error
from activities.store import Store, StoreError
from domain.failpoints import failpoint
from domain.operations.common import FinishInput
from domain.operations.golden import GoldenPlan, GoldenSnapshotInput
from domain.operations.pause import PausePlan
from domain.operations.resume import BeginResumeInput, ResumePlan
from domain.operations.suspend import BeginSuspendInput, CompleteSnapshotInput, SuspendPlan
from domain.operations.upload import CompleteUploadInput, UploadInput, UploadPlan


class DbActivities:
    """Postgres activities bound to one `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @activity.defn(name="begin_resume")
    async def begin_resume(self, request: BeginResumeInput) -> ResumePlan:
        """Place and bind: SUSPENDED -> RESUMING on a chosen worker (one transaction)."""
        await failpoint("ResumeActor.before_placement")
        try:
            plan = await self.store.resumes.begin(request.actor, request.operation_id)
        except StoreError as error:
            raise from_store_error(error) from error
        await failpoint("ResumeActor.after_bind")
        return plan

    @activity.defn(name="finish_resume")
    async def finish_resume(self, request: FinishInput) -> None:
        """RESUMING -> RUNNING."""
        await failpoint("ResumeActor.before_finalize")
        try:
            await self.store.resumes.finish(request.actor, request.operation_id)
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="rollback_resume")
    async def rollback_resume(self, request: FinishInput) -> None:
        """RESUMING -> SUSPENDED and free the place, recording the error."""
        await self.store.resumes.rollback(request.actor, request.operation_id, request.error or "resume failed")

    @activity.defn(name="begin_suspend")
    async def begin_suspend(self, request: BeginSuspendInput) -> SuspendPlan:
        """RUNNING -> SUSPENDING with a PENDING snapshot reserved."""
        await failpoint("SuspendActor.before_mark")
        try:
            plan = await self.store.suspends.begin(request.actor, request.operation_id, request.mode)
        except StoreError as error:
            raise from_store_error(error) from error
        await failpoint("SuspendActor.after_mark")
        return plan

    @activity.defn(name="complete_suspend")
    async def complete_suspend(self, request: CompleteSnapshotInput) -> None:
        """Snapshot COMPLETED, actor SUSPENDED, worker freed."""
        await failpoint("SuspendActor.before_finalize")
        try:
            await self.store.suspends.complete(
                request.actor, request.operation_id, request.snapshot_id, request.manifest, request.size_bytes
            )
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="rollback_suspend")
    async def rollback_suspend(self, request: CompleteSnapshotInput) -> None:
        """SUSPENDING|PAUSING -> RUNNING after a failed checkpoint, SUSPENDING -> PAUSED after a failed
        upload (the error is in manifest['error'])."""
        await self.store.suspends.rollback(
            request.actor, request.operation_id, request.snapshot_id, str(request.manifest.get("error", ""))
        )

    @activity.defn(name="begin_pause")
    async def begin_pause(self, request: BeginSuspendInput) -> PausePlan:
        """RUNNING -> PAUSING with a PENDING local snapshot reserved on the worker's node."""
        await failpoint("PauseActor.before_mark")
        try:
            plan = await self.store.pauses.begin(request.actor, request.operation_id)
        except StoreError as error:
            raise from_store_error(error) from error
        await failpoint("PauseActor.after_mark")
        return plan

    @activity.defn(name="complete_pause")
    async def complete_pause(self, request: CompleteSnapshotInput) -> None:
        """Local snapshot COMPLETED, actor PAUSED and pinned to its node, worker freed."""
        await failpoint("PauseActor.before_finalize")
        try:
            await self.store.pauses.complete(
                request.actor, request.operation_id, request.snapshot_id, request.manifest, request.size_bytes
            )
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="begin_upload")
    async def begin_upload(self, request: UploadInput) -> UploadPlan:
        """Reserve the storage-location snapshot an async suspend's local one is uploaded to."""
        await failpoint("UploadSnapshot.before_reserve")
        try:
            return await self.store.uploads.begin(request.actor, request.operation_id, request.local_snapshot_id)
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="complete_upload")
    async def complete_upload(self, request: CompleteUploadInput) -> bool:
        """The upload landed: it becomes the actor's latest snapshot when the actor still waits for it."""
        await failpoint("UploadSnapshot.before_finalize")
        try:
            return await self.store.uploads.complete(
                request.actor, request.local_snapshot_id, request.snapshot_id, request.manifest, request.size_bytes
            )
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="abandon_upload")
    async def abandon_upload(self, request: UploadInput) -> None:
        """Forget the snapshot an upload reserved and will not complete."""
        await self.store.uploads.abandon(request.actor, request.operation_id)

    @activity.defn(name="begin_golden")
    async def begin_golden(self, request: GoldenSnapshotInput) -> GoldenPlan:
        """Bind a worker for the template's golden boot and reserve the snapshot."""
        await failpoint("GoldenSnapshot.before_placement")
        try:
            plan = await self.store.golden_snapshots.begin(
                request.atespace, request.template, activity.info().workflow_run_id or ""
            )
        except StoreError as error:
            raise from_store_error(error) from error
        await failpoint("GoldenSnapshot.after_bind")
        return plan

    @activity.defn(name="complete_golden")
    async def complete_golden(self, request: CompleteSnapshotInput) -> None:
        """Golden snapshot COMPLETED, template Ready."""
        await failpoint("GoldenSnapshot.before_finalize")
        await self.store.golden_snapshots.complete(
            request.actor.atespace, request.actor.name, request.snapshot_id, request.manifest, request.size_bytes
        )

    @activity.defn(name="fail_golden")
    async def fail_golden(self, request: FinishInput) -> None:
        """Template Failed with the reason; its place released."""
        await self.store.golden_snapshots.fail(
            request.actor.atespace, request.actor.name, request.operation_id, request.error or "golden snapshot failed"
        )
