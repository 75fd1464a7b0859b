"""Activities of RevertActor, EvictionDeadline and the snapshot garbage collector.

Each is idempotent: the store transitions are guarded by the operation ID or by state, and
deleting a snapshot twice finds nothing the second time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.atelet import AteletActivities, call_id
from activities.errors import from_grpc_error, from_store_error
from activities.store import Store, StoreError
from atelet.proto import atelet_pb2 as pb
from domain.failpoints import failpoint
from domain.operations.common import ActorOperation
from domain.operations.drain import BeginDrainInput, CrashInput, DrainPlan, Leftover
from domain.operations.revert import FenceInput, FinishRevertInput, RevertPlan
from domain.operations.snapshot_gc import DeleteSnapshotInput, GarbageSnapshot, SnapshotGcInput
from domain.states import SnapshotStorage


class LifecycleActivities:
    """Store transitions for revert, drain and GC, plus snapshot deletion through an atelet."""

    def __init__(self, store: Store, atelets: AteletActivities) -> None:
        self.store = store
        self.atelets = atelets

    @activity.defn(name="begin_revert")
    async def begin_revert(self, request: ActorOperation) -> RevertPlan:
        """Mark REVERTING; returns the worker to clean and whether its node is alive."""
        await failpoint("RevertActor.before_mark")
        try:
            plan = await self.store.reverts.begin(request.actor, request.operation_id)
        except StoreError as error:
            raise from_store_error(error) from error
        await failpoint("RevertActor.after_mark")
        return plan

    @activity.defn(name="fence_worker")
    async def fence_worker(self, request: FenceInput) -> None:
        """Keep a worker out of placement until its atelet reports it idle."""
        await self.store.nodes.fence_worker(request.worker_id, request.reason)

    @activity.defn(name="finish_revert")
    async def finish_revert(self, request: FinishRevertInput) -> None:
        """REVERTING -> SUSPENDED with the last COMPLETED snapshot."""
        await failpoint("RevertActor.before_finalize")
        try:
            await self.store.reverts.finish(request.actor, request.operation_id, request.note)
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="begin_drain")
    async def begin_drain(self, request: BeginDrainInput) -> DrainPlan:
        """Mark the node draining and list its actors."""
        deadline = datetime.now(UTC) + timedelta(seconds=request.deadline_seconds)
        try:
            return await self.store.drains.begin(request.node, deadline)
        except StoreError as error:
            raise from_store_error(error) from error

    @activity.defn(name="drain_leftovers")
    async def drain_leftovers(self, node: str) -> list[Leftover]:
        """Actors still bound to the node's workers."""
        return [Leftover(actor=ref, worker=worker) for ref, worker in await self.store.drains.leftovers(node)]

    @activity.defn(name="crash_after_deadline")
    async def crash_after_deadline(self, request: CrashInput) -> None:
        """Mark an actor left on a drained node CRASHED (its last COMPLETED snapshot is kept)."""
        await self.store.drains.crash_after_deadline(request.actor, request.worker_id, request.reason, request.node)

    @activity.defn(name="garbage_snapshots")
    async def garbage_snapshots(self, request: SnapshotGcInput) -> list[GarbageSnapshot]:
        """A batch of snapshots nothing needs."""
        return await self.store.snapshots.garbage(request.batch, request.min_age_seconds)

    @activity.defn(name="delete_snapshot")
    async def delete_snapshot(self, request: DeleteSnapshotInput) -> bool:
        """Delete a snapshot's data through a live atelet, then its row. Returns whether data existed.

        A LOCAL snapshot lies on one node: only that node's atelet can delete it.

        Raises:
            ApplicationError: no (suitable) atelet is alive (retried), or the atelet refused the URI.
        """
        snapshot = request.snapshot
        if snapshot.storage == SnapshotStorage.LOCAL and snapshot.node:
            address = await self.store.nodes.live_atelet_of(snapshot.node)
            if address is None:
                raise ApplicationError(
                    f"node {snapshot.node} holding local snapshot {snapshot.uri} is not alive; retrying later",
                    type="NoAtelet",
                )
        else:
            address = await self.store.nodes.any_live_atelet()
        if address is None:
            raise ApplicationError("no atelet is alive to delete snapshots; retrying later", type="NoAtelet")
        stub = await self.atelets.stub(address)
        try:
            done = await stub.DeleteSnapshot(
                pb.DeleteSnapshotRequest(
                    operation_id=call_id(f"gc-{snapshot.snapshot_id}", "delete"), snapshot_uri=snapshot.uri
                ),
                timeout=60,
            )
        except grpc.aio.AioRpcError as error:
            raise from_grpc_error(error, "DeleteSnapshot", address) from error
        try:
            await self.store.snapshots.forget(snapshot.snapshot_id)
        except StoreError as error:
            raise from_store_error(error) from error
        return bool(done.existed)
