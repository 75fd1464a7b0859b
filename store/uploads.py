"""Store transitions of the UploadSnapshot workflow: the background upload of an async suspend's
local snapshot (ARCHITECTURE.md, "Workflows": SuspendActor mode async).

The upload runs beside the actor's own operations (it holds no per-actor lock): a resume may
restore the local copy meanwhile, a revert may drop it. So each step checks that the actor
still waits for this local snapshot, and the upload only becomes the actor's latest snapshot
when it does (and when it is newer than the latest). Each method is idempotent for its
operation ID.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from domain.operations.upload import UploadPlan
from domain.refs import ActorRef
from store.errors import FailedPrecondition, NotFound
from store.nodes import Nodes
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q


class Uploads:
    """begin, complete and abandon of an upload."""

    def __init__(self, pool: asyncpg.Pool, nodes: Nodes, snapshots: Snapshots) -> None:
        self.pool = pool
        self.nodes = nodes
        self.snapshots = snapshots

    async def begin(self, ref: ActorRef, operation_id: str, local_snapshot_id: int) -> UploadPlan:
        """Reserve the storage-location snapshot the local one is copied to (idempotent).

        Returns:
            needed=False when the actor no longer waits for this local snapshot (a resume
            consumed it, a revert dropped it, the actor is gone).

        Raises:
            FailedPrecondition: the node holding the local snapshot is not alive (retry later).
        """
        owner = ref.workflow_id
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None or actor["pending_upload_snapshot_id"] != local_snapshot_id:
                return UploadPlan(needed=False)
            source = await self.snapshots.ref(connection, local_snapshot_id)
            address = await self.nodes.atelet_address(connection, source.node)
            if address is None:
                raise FailedPrecondition(
                    f"node {source.node} holding actor {ref.key}'s snapshot is not available; upload retried later",
                    {"pinned_node": source.node},
                )
            existing = await connection.fetchrow(Q["find_snapshot_of_operation"], owner, operation_id)
            if existing is not None:
                destination = await self.snapshots.ref(connection, existing["id"])
            else:
                destination = await self.snapshots.reserve(
                    connection, owner=owner, operation_id=operation_id, spec=spec_of(actor), scope=source.scope
                )
            return UploadPlan(needed=True, source=source, destination=destination, atelet_address=address)

    async def complete(
        self,
        ref: ActorRef,
        local_snapshot_id: int,
        snapshot_id: int,
        manifest: dict[str, Any],
        size_bytes: int,
    ) -> bool:
        """The upload landed: snapshot COMPLETED; it becomes the actor's latest (and the actor is
        unpinned) when the actor still waits for `local_snapshot_id` and the upload is newer than
        its latest. Returns whether the actor took it. Idempotent.

        Raises:
            NotFound: the snapshot row is gone (the upload was abandoned meanwhile).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            uploaded = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
            if uploaded is None:
                raise NotFound(f"snapshot {snapshot_id} of actor {ref.key} no longer exists")
            actor = await connection.fetchrow(Q["lock_actor_pending_upload"], ref.atespace, ref.name)
            if actor is None:
                return False
            if actor["latest_snapshot_id"] == snapshot_id:
                return True  # a repeat
            if actor["pending_upload_snapshot_id"] != local_snapshot_id:
                return False
            if actor["latest_generation"] is not None and actor["latest_generation"] > uploaded["generation"]:
                return False
            await connection.execute(Q["mark_actor_uploaded"], ref.atespace, ref.name, snapshot_id)
            return True

    async def abandon(self, ref: ActorRef, operation_id: str) -> None:
        """Forget the snapshot an upload reserved but never completed (idempotent)."""
        await self.pool.execute(Q["delete_pending_snapshots_of_operation"], ref.workflow_id, operation_id)
