"""GoldenSnapshot's transitions: bind a worker for a template's golden boot and reserve its
snapshot, then record the outcome (template Ready or Failed).

Idempotent for the workflow run ID (see `resumes`).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from domain.operations.golden import GoldenPlan
from domain.states import SnapshotScope
from domain.temporal import template_workflow_id
from store.errors import NotFound
from store.placement import Placement, demand_of
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q


class GoldenSnapshots:
    """begin, complete and fail of a template's golden snapshot."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement, snapshots: Snapshots) -> None:
        self.pool = pool
        self.placement = placement
        self.snapshots = snapshots

    async def begin(self, atespace: str, template: str, operation_id: str) -> GoldenPlan:
        """Bind a worker for a template's golden boot and reserve its snapshot (idempotent).

        Raises:
            NotFound: unknown template.
            NoCapacity: no worker has room.
        """
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(Q["get_template"], atespace, template)
            if row is None:
                raise NotFound(f"actor template {atespace}/{template} not found")
            spec = spec_of(row)
            existing = await connection.fetchrow(Q["find_snapshot_of_operation"], owner, operation_id)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if existing is not None and placement is not None and placement["operation_id"] == operation_id:
                worker = await self.placement.worker_ref(connection, placement["worker_id"])
                snapshot = await self.snapshots.ref(connection, existing["id"])
                return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)
            if placement is not None:
                await connection.execute(Q["delete_placement"], owner)
            worker_id = await self.placement.place(  # a fresh boot: no snapshot, any runsc build
                connection,
                holder=owner,
                operation_id=operation_id,
                demand=demand_of(f"the golden boot of template {atespace}/{template}", spec, {}),
            )
            if existing is not None:
                snapshot = await self.snapshots.ref(connection, existing["id"])
            else:
                snapshot = await self.snapshots.reserve(
                    connection, owner=owner, operation_id=operation_id, spec=spec, scope=SnapshotScope.FULL
                )
            worker = await self.placement.worker_ref(connection, worker_id)
            return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)

    async def complete(
        self, atespace: str, template: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Golden snapshot COMPLETED, template Ready, place freed (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            await connection.execute(Q["set_template_phase"], atespace, template, "Ready", None, snapshot_id)
            await connection.execute(Q["delete_placement"], owner)

    async def fail(self, atespace: str, template: str, operation_id: str, reason: str) -> None:
        """Template Failed with the reason; place and PENDING snapshot row released (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["set_template_phase"], atespace, template, "Failed", reason, None)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if placement is not None and placement["operation_id"] == operation_id:
                await connection.execute(Q["delete_placement"], owner)
            await connection.execute(Q["delete_pending_snapshots_of_operation"], owner, operation_id)
