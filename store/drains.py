"""EvictionDeadline's transitions: a node drained (its workers take no new actors), the actors
left on it at the deadline, and their crash (ARCHITECTURE.md, "Workflows": EvictionDeadline)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from domain.operations.drain import DrainPlan
from domain.refs import ActorRef, WorkerRef
from domain.states import ON_WORKER, ActorState
from store.crashes import hold_for_drain, hold_router_draining_workers
from store.errors import NotFound
from store.placement import Placement
from store.sql import QUERIES as Q


class Drains:
    """begin, leftovers, crash_after_deadline and end of a node's drain."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement) -> None:
        self.pool = pool
        self.placement = placement

    async def begin(self, node: str, deadline: datetime) -> DrainPlan:
        """Mark a node draining (its workers take no new actors); list the actors on it.

        Raises:
            NotFound: unknown node.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["mark_node_draining"], node, deadline) is None:
                raise NotFound(f"node {node} not found")
            await connection.execute(Q["set_node_workers_state"], node, "UNAVAILABLE", "draining")
            plan = DrainPlan()
            # Bound to the node's workers, or PAUSED with the local snapshot on its disk (a suspend
            # uploads it): both must be suspended before the node goes.
            actors = [*await connection.fetch(Q["actors_on_node"], node),
                      *await connection.fetch(Q["actors_pinned_to_node"], node)]  # fmt: skip
            for actor in actors:
                ref = ActorRef(actor["atespace"], actor["name"])
                if actor["state"] in (*ON_WORKER, ActorState.PAUSED):
                    if ref not in plan.running:
                        plan.running.append(ref)
                else:
                    plan.other.append((ref, actor["state"]))
            return plan

    async def leftovers(self, node: str) -> list[tuple[ActorRef, WorkerRef | None]]:
        """Actors still on a drained node (not SUSPENDED by the deadline): bound to its workers
        (with the worker), or PAUSED with their local snapshot there (worker None)."""
        async with self.pool.acquire() as connection:
            rows = await connection.fetch(Q["actors_on_node"], node)
            left: list[tuple[ActorRef, WorkerRef | None]] = [
                (ActorRef(r["atespace"], r["name"]), await self.placement.worker_ref(connection, r["worker_id"])) for r in rows
            ]
            for r in await connection.fetch(Q["actors_pinned_to_node"], node):
                ref = ActorRef(r["atespace"], r["name"])
                if all(ref != other for other, _ in left):
                    left.append((ref, None))
            return left

    async def crash_after_deadline(
        self, ref: ActorRef, worker_id: int | None, reason: str, node: str | None = None
    ) -> None:
        """Eviction deadline passed: the actor becomes CRASHED whatever its state, place freed.

        `worker_id` None: a PAUSED actor whose local snapshot on `node` was not uploaded in time
        (the snapshot is released). Its last COMPLETED snapshot stays its latest, so a revert
        brings it back.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if worker_id is None:
                await connection.execute(Q["crash_paused_actor_after_deadline"], ref.atespace, ref.name, node, reason)
                return
            version = await connection.fetchval(
                Q["crash_actor_after_deadline"], ref.atespace, ref.name, worker_id, reason
            )
            if actor is not None and actor["in_progress_snapshot_id"] is not None:  # a suspend that lost the race
                await connection.execute(Q["delete_pending_snapshot"], actor["in_progress_snapshot_id"])
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            if version is not None:  # it may have been serving: the routers drop its address first
                await hold_for_drain(connection, ref, worker_id, version)

    async def end(self, node: str) -> None:
        """Clear a node's drain: its workers take actors again at the next heartbeat."""
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["mark_node_draining"], node, None) is None:
                raise NotFound(f"node {node} not found")
            await connection.execute(Q["set_node_workers_state"], node, "ACTIVE", None)
            await hold_router_draining_workers(connection, node)
