"""PauseActor's transitions: RUNNING -> PAUSING with a PENDING LOCAL snapshot reserved on the
worker's node, -> PAUSED pinned to that node (its rollback is `Suspends.rollback`).

Each runs in one transaction that locks the actor row, checks the edge against
`domain.states.TRANSITIONS`, and is idempotent for its operation ID (see `resumes`).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from domain.operations.pause import PausePlan
from domain.refs import ActorRef
from domain.states import TRANSITIONS, ActorState, Operation
from store.errors import FailedPrecondition, NotFound, VersionConflict, refused
from store.placement import Placement
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q

PAUSE = TRANSITIONS[Operation.PAUSE]


class Pauses:
    """begin and complete of a pause."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement, snapshots: Snapshots) -> None:
        self.pool = pool
        self.placement = placement
        self.snapshots = snapshots

    async def begin(self, ref: ActorRef, operation_id: str, reason: str | None = None) -> PausePlan:
        """RUNNING|FROZEN -> PAUSING with a PENDING LOCAL snapshot reserved on the worker's node
        (idempotent per operation); `reason` (why ate paused it by itself) goes to its history.

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
                worker = await self.placement.worker_ref(connection, actor["worker_id"])
                snapshot = await self.snapshots.ref(connection, actor["in_progress_snapshot_id"])
                return PausePlan(already_paused=False, worker=worker, snapshot=snapshot)
            if not PAUSE.allows(state):
                raise refused(PAUSE, ref.key, state)
            spec = spec_of(actor)
            worker = await self.placement.worker_ref(connection, actor["worker_id"])
            snapshot = await self.snapshots.reserve(
                connection,
                owner=ref.workflow_id,
                operation_id=operation_id,
                spec=spec,
                scope=spec.snapshot_config.on_pause,
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
                Operation.PAUSE.value,
                f"{worker.pool}/{worker.name}",
                reason,
            )
            return PausePlan(already_paused=False, worker=worker, snapshot=snapshot)

    async def complete(
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
