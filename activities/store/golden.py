"""GoldenSnapshot's transitions: bind a worker for a template's golden boot, record the outcome.

Idempotent for the workflow run ID (see `transitions`).
"""

from typing import Any

from activities.store.errors import NotFound
from activities.store.placement import PlacementMixin
from activities.store.sql import QUERIES as Q
from domain.operations.golden import GoldenPlan
from domain.states import SnapshotScope
from domain.temporal import template_workflow_id


class GoldenMixin(PlacementMixin):
    """begin_golden, complete_golden, fail_golden (mixed into `Store`)."""

    # ---- GoldenSnapshot ---------------------------------------------------------------------

    async def begin_golden(self, atespace: str, template: str, operation_id: str) -> GoldenPlan:
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
            spec = row["spec"]
            existing = await connection.fetchrow(Q["find_snapshot_of_operation"], owner, operation_id)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if existing is not None and placement is not None and placement["operation_id"] == operation_id:
                worker = await self._worker_ref(connection, placement["worker_id"])
                snapshot = await self._snapshot_ref(connection, existing["id"])
                return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)
            if placement is not None:
                await connection.execute(Q["delete_placement"], owner)
            worker_id = await self._place(
                connection,
                holder=owner,
                operation_id=operation_id,
                label=f"the golden boot of template {atespace}/{template}",
                spec=spec,
                actor_selector={},
            )
            if existing is not None:
                snapshot = await self._snapshot_ref(connection, existing["id"])
            else:
                snapshot = await self._reserve_snapshot(
                    connection, owner=owner, operation_id=operation_id, spec=spec, scope=SnapshotScope.FULL
                )
            worker = await self._worker_ref(connection, worker_id)
            return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)

    async def complete_golden(
        self, atespace: str, template: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Golden snapshot COMPLETED, template Ready, place freed (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            await connection.execute(Q["set_template_phase"], atespace, template, "Ready", None, snapshot_id)
            await connection.execute(Q["delete_placement"], owner)

    async def fail_golden(self, atespace: str, template: str, operation_id: str, reason: str) -> None:
        """Template Failed with the reason; place and PENDING snapshot row released (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["set_template_phase"], atespace, template, "Failed", reason, None)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if placement is not None and placement["operation_id"] == operation_id:
                await connection.execute(Q["delete_placement"], owner)
            await connection.execute(Q["delete_pending_snapshots_of_operation"], owner, operation_id)
