"""SuspendActor's transitions: RUNNING|PAUSED -> SUSPENDING with a PENDING snapshot reserved,
-> SUSPENDED with it COMPLETED, or back after a failed checkpoint or upload.

Each runs in one transaction that locks the actor row, checks the edge against
`domain.states.TRANSITIONS`, and is idempotent for its operation ID (see `resumes`).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from domain.operations.suspend import SuspendPlan
from domain.refs import ActorRef
from domain.states import ON_WORKER, TRANSITIONS, ActorState, Operation, SnapshotStorage
from store.errors import FailedPrecondition, NotFound, VersionConflict, refused
from store.pinning import Pinning
from store.placement import Placement
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q

SUSPEND = TRANSITIONS[Operation.SUSPEND]


class Suspends:
    """begin, complete and rollback of a suspend (and of a pause's checkpoint rollback)."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement, snapshots: Snapshots, pinning: Pinning) -> None:
        self.pool = pool
        self.placement = placement
        self.snapshots = snapshots
        self.pinning = pinning

    async def begin(
        self, ref: ActorRef, operation_id: str, mode: str = "sync", reason: str | None = None
    ) -> SuspendPlan:
        """RUNNING|FROZEN|PAUSED -> SUSPENDING with a PENDING snapshot row reserved (idempotent per
        operation); `reason` (why ate suspended it by itself) goes to its history. A FROZEN
        actor's sandbox is thawed by the atelet's checkpoint.

        Mode "async" from RUNNING reserves a LOCAL snapshot on the worker's node (uploaded later
        by an UploadSnapshot workflow); from PAUSED the upload is done now either way.

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor's state does not allow a suspend, or it is PAUSED on a
                node that is not available.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            if state == ActorState.SUSPENDED:
                return SuspendPlan(already_suspended=True)
            if state == ActorState.SUSPENDING and actor["operation_id"] == operation_id:
                snapshot = await self.snapshots.ref(connection, actor["in_progress_snapshot_id"])
                if actor["local_snapshot_id"] is not None:
                    return await self.pinning.upload_plan(connection, ref, actor["local_snapshot_id"], snapshot)
                bound = await self.placement.worker_ref(connection, actor["worker_id"])
                return SuspendPlan(already_suspended=False, worker=bound, snapshot=snapshot)
            if not SUSPEND.allows(state):
                raise refused(SUSPEND, ref.key, state)
            spec = spec_of(actor)
            running = state in ON_WORKER
            worker = await self.placement.worker_ref(connection, actor["worker_id"]) if running else None
            local = await self.snapshots.ref(connection, actor["local_snapshot_id"]) if worker is None else None
            if local is not None:
                await self.pinning.atelet_of(connection, ref, local)  # refuse before marking when the node is gone
            # An upload keeps the scope the pause wrote; a checkpoint writes the onCommit scope.
            snapshot = await self.snapshots.reserve(
                connection,
                owner=ref.workflow_id,
                operation_id=operation_id,
                spec=spec,
                scope=local.scope if local is not None else spec.snapshot_config.on_commit,
                local_node=worker.node if worker is not None and mode == "async" else None,
            )
            updated = await connection.fetchval(
                Q["mark_actor_suspending"], ref.atespace, ref.name, actor["version"], operation_id, snapshot.snapshot_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                Operation.SUSPEND.value,
                f"{worker.pool}/{worker.name}" if worker else f"upload from {local.node if local else '?'}",
                reason,
            )
            if local is not None:
                return await self.pinning.upload_plan(connection, ref, local.snapshot_id, snapshot)
            return SuspendPlan(already_suspended=False, worker=worker, snapshot=snapshot)

    async def complete(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Snapshot COMPLETED, actor SUSPENDED with it as latest, place freed: one transaction.
        For an async suspend (a LOCAL snapshot), the actor is SUSPENDED pinned to the node with the
        snapshot pending upload instead; its latest stays the last uploaded one.

        Idempotent: a repeat after success finds the actor SUSPENDED with this snapshot.

        Raises:
            FailedPrecondition: the actor is no longer held by this operation.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            snapshot = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
            if snapshot is not None and snapshot["storage"] == SnapshotStorage.LOCAL:
                updated = await connection.fetchval(
                    Q["mark_actor_suspended_locally"],
                    ref.atespace,
                    ref.name,
                    operation_id,
                    snapshot_id,
                    snapshot["node"],
                )
            else:
                updated = await connection.fetchval(
                    Q["mark_actor_suspended"], ref.atespace, ref.name, operation_id, snapshot_id
                )
            if updated is None:
                if _suspended_with(await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name), snapshot_id):
                    return
                raise FailedPrecondition(f"actor {ref.key} is no longer suspending under operation {operation_id}")
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)

    async def completed(self, ref: ActorRef, snapshot_id: int) -> bool:
        """Whether `complete` committed for this snapshot: the actor is SUSPENDED with it as its
        latest (or, after an async suspend, its local) snapshot."""
        return _suspended_with(await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name), snapshot_id)

    async def rollback(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, error: str, *, abandoned: bool = False
    ) -> None:
        """SUSPENDING|PAUSING -> RUNNING after a failed checkpoint, or SUSPENDING -> PAUSED after a
        failed upload of the local snapshot; the PENDING snapshot row is dropped (idempotent).
        `abandoned`: an idle or pressure operation gave way to traffic before its checkpoint: no
        error is left on the actor, and its history says `abandoned` with `error` as the why."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchval(
                Q["rollback_actor_suspend"], ref.atespace, ref.name, operation_id, None if abandoned else error
            )
            await connection.execute(Q["delete_pending_snapshot"], snapshot_id)
            await connection.execute(Q["finish_operation"], operation_id, "abandoned" if abandoned else "failed", error, None)
            if abandoned:  # the request in flight proves it busy now: its idle time starts again
                await connection.execute(Q["touch_actors"], [ref.atespace], [ref.name])


def _suspended_with(row: asyncpg.Record | None, snapshot_id: int) -> bool:
    """Whether the actor row says SUSPENDED with this snapshot as its latest (or, after an async
    suspend, its local) one: `complete` committed for it."""
    return (
        row is not None
        and row["state"] == ActorState.SUSPENDED
        and snapshot_id in (row["snapshot_id"], row["local_snapshot_id"])
    )
