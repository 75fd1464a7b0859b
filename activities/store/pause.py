"""PauseActor's transitions, and what resume and suspend need for a PAUSED (or async-suspended)
actor: why its pinned node cannot take it back, and the plan to upload its local snapshot.

Each transition runs in one transaction that locks the actor row and is idempotent for its
operation ID (see `transitions`).
"""

from typing import Any

import asyncpg

from activities.store.errors import FailedPrecondition, NoCapacity, NotFound, PinnedNodeFull, VersionConflict
from activities.store.placement import NODE_LIVENESS_SECONDS, PlacementMixin, limits_of
from activities.store.snapshot_names import pause_scope_of
from activities.store.sql import QUERIES as Q
from domain.operations.pause import PausePlan
from domain.operations.suspend import SuspendPlan
from domain.refs import ActorRef, SnapshotRef
from domain.states import ActorState


class PauseMixin(PlacementMixin):
    """begin_pause, complete_pause and the pinned-node helpers (mixed into `Store`)."""

    async def _pinned_no_room(
        self, connection: asyncpg.Connection, ref: ActorRef, actor: asyncpg.Record, node: str, error: NoCapacity
    ) -> NoCapacity:
        """Why a paused actor cannot go back to its node, as the error to raise.

        PinnedNodeFull when the node is alive and another node has room (the resume uploads the
        local snapshot and places the actor elsewhere); otherwise NoCapacity saying what to do.
        """
        address = await connection.fetchrow(Q["node_address"], node, NODE_LIVENESS_SECONDS)
        if address is None or not address["alive"]:
            latest = actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
            fallback = await self._snapshot_ref(connection, latest) if latest else None
            back_to = f"generation {fallback.generation}" if fallback else "its template's golden snapshot"
            paused = actor["local_snapshot_id"] is not None
            what = "paused state" if paused else "snapshot (not uploaded yet)"
            drop = "the paused state" if paused else "that snapshot"
            return NoCapacity(
                f"actor {ref.key} is {actor['state']} and its {what} lies on node {node}, which is not "
                f"available (no heartbeat for {NODE_LIVENESS_SECONDS:g} s); resume it when the node is back, or "
                f"drop {drop} and go back to its last uploaded snapshot ({back_to}) with "
                f"'ate revert actor {ref.name} -a {ref.atespace}'",
                {"state": actor["state"], "pinned_node": node},
            )
        spec = actor["spec"]
        cpu, memory = limits_of(spec)
        elsewhere = await connection.fetch(
            Q["placement_candidates"],
            str(spec.get("sandboxClass") or "gvisor"),
            spec.get("workerSelector") or {},
            actor["worker_selector"],
            cpu,
            memory,
            [],
            1,
            None,
        )
        if elsewhere:
            return PinnedNodeFull(
                f"{error.message}; other nodes have room: the paused snapshot is uploaded and the actor placed there",
                {"pinned_node": node},
            )
        return error

    async def _node_atelet(self, connection: asyncpg.Connection, ref: ActorRef, local: SnapshotRef) -> str:
        """The address of the atelet holding `local`.

        Raises:
            FailedPrecondition: that node is not alive (nothing can read the paused snapshot).
        """
        row = await connection.fetchrow(Q["node_address"], local.node, NODE_LIVENESS_SECONDS)
        if row is None or not row["alive"]:
            raise FailedPrecondition(
                f"actor {ref.key} is PAUSED on node {local.node}, which is not available (no heartbeat for "
                f"{NODE_LIVENESS_SECONDS:g} s), so its paused snapshot cannot be uploaded; retry when the node is "
                f"back, or drop the paused state with 'ate revert actor {ref.name} -a {ref.atespace}'",
                {"state": ActorState.PAUSED.value, "pinned_node": local.node},
            )
        return str(row["address"])

    async def _upload_plan(
        self, connection: asyncpg.Connection, ref: ActorRef, local_id: int, destination: SnapshotRef
    ) -> SuspendPlan:
        """The plan of a suspend from PAUSED: copy the local snapshot to `destination`."""
        local = await self._snapshot_ref(connection, local_id)
        address = await self._node_atelet(connection, ref, local)
        return SuspendPlan(already_suspended=False, snapshot=destination, upload_from=local, atelet_address=address)

    # ---- PauseActor -------------------------------------------------------------------------

    async def begin_pause(self, ref: ActorRef, operation_id: str) -> PausePlan:
        """RUNNING -> PAUSING with a PENDING LOCAL snapshot reserved on the worker's node
        (idempotent per operation).

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor's state does not allow a pause.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            if state == ActorState.PAUSED:
                return PausePlan(already_paused=True)
            if state == ActorState.PAUSING and actor["operation_id"] == operation_id:
                worker = await self._worker_ref(connection, actor["worker_id"])
                snapshot = await self._snapshot_ref(connection, actor["in_progress_snapshot_id"])
                return PausePlan(already_paused=False, worker=worker, snapshot=snapshot)
            if state != ActorState.RUNNING:
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be paused from state {state} (PauseActor wants RUNNING)",
                    {"state": state},
                )
            spec = actor["spec"]
            worker = await self._worker_ref(connection, actor["worker_id"])
            owner = ref.workflow_id
            snapshot = await self._reserve_snapshot(
                connection,
                owner=owner,
                operation_id=operation_id,
                spec=spec,
                scope=pause_scope_of(spec),
                local_node=worker.node,
            )
            updated = await connection.fetchval(
                Q["mark_actor_pausing"], ref.atespace, ref.name, actor["version"], operation_id, snapshot.snapshot_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                "PauseActor",
                f"{worker.pool}/{worker.name}",
            )
            return PausePlan(already_paused=False, worker=worker, snapshot=snapshot)

    async def complete_pause(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Local snapshot COMPLETED, actor PAUSED and pinned to its node, place freed: one transaction.

        Idempotent: a repeat after success finds the actor PAUSED with this local snapshot.

        Raises:
            FailedPrecondition: the actor is no longer held by this operation.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            snapshot = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
            updated = await connection.fetchval(
                Q["mark_actor_paused"], ref.atespace, ref.name, operation_id, snapshot_id, snapshot["node"]
            )
            if updated is None:
                row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
                if row is not None and row["state"] == ActorState.PAUSED and row["local_snapshot_id"] == snapshot_id:
                    return
                raise FailedPrecondition(f"actor {ref.key} is no longer pausing under operation {operation_id}")
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)
