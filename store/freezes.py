"""FreezeActor's transitions: RUNNING -> FROZEN (written before the sandbox is stopped, so the
routers stop sending at its NOTIFY), the freeze finished (FROZEN rests), or rolled back to RUNNING
(traffic came, or the atelet could not stop the sandbox).

Each runs in one transaction that locks the actor row, checks the edge against
`domain.states.TRANSITIONS`, and is idempotent for its operation ID (see `resumes`).
"""

from __future__ import annotations

import asyncpg

from domain.operations.freeze import FreezePlan
from domain.refs import ActorRef
from domain.states import TRANSITIONS, ActorState, Operation
from store.errors import FailedPrecondition, NotFound, VersionConflict, refused
from store.placement import Placement
from store.sql import QUERIES as Q

FREEZE = TRANSITIONS[Operation.FREEZE]


class Freezes:
    """begin, finish and rollback of a freeze."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement) -> None:
        self.pool = pool
        self.placement = placement

    async def begin(self, ref: ActorRef, operation_id: str, reason: str | None = None) -> FreezePlan:
        """RUNNING -> FROZEN under this operation, recorded in the actor's history with `reason`
        (idempotent per operation: a repeat returns the same worker).

        Returns:
            `already_frozen` when the actor rests FROZEN (no operation holds it); else the worker
            whose sandbox the caller stops next.

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor is not RUNNING (the message names its state).
            VersionConflict: the row changed under us (retried).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            if state == ActorState.FROZEN and actor["operation_id"] == operation_id:
                return FreezePlan(already_frozen=False, worker=await self.placement.worker_ref(connection, actor["worker_id"]))
            if state == ActorState.FROZEN and actor["operation"] is None:
                return FreezePlan(already_frozen=True)
            if not FREEZE.allows(state):
                raise refused(FREEZE, ref.key, state)
            worker = await self.placement.worker_ref(connection, actor["worker_id"])
            updated = await connection.fetchval(
                Q["mark_actor_freezing"], ref.atespace, ref.name, actor["version"], operation_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            await connection.execute(
                Q["insert_operation"], operation_id, ref.atespace, ref.name, Operation.FREEZE.value,
                f"{worker.pool}/{worker.name}", reason,
            )  # fmt: skip
            return FreezePlan(already_frozen=False, worker=worker)

    async def finish(self, ref: ActorRef, operation_id: str, error: str | None = None) -> None:
        """The sandbox is stopped (or, with `error`, may be): the actor rests FROZEN and the
        operation is recorded finished, `failed` with the error when given (idempotent: a repeat
        finds it resting).

        Raises:
            FailedPrecondition: the actor is no longer held by this freeze (a revert or a delete
                took it over).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["finish_actor_freeze"], ref.atespace, ref.name, operation_id)
            await connection.execute(Q["finish_operation"], operation_id, "failed" if error else "ok", error, None)
            if updated is not None:
                return
            row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
            if row is not None and row["state"] == ActorState.FROZEN and row["operation"] is None:
                return
            state = row["state"] if row is not None else "deleted"
            raise FailedPrecondition(f"actor {ref.key} is no longer being frozen under operation {operation_id} (state: {state})")

    async def rollback(self, ref: ActorRef, operation_id: str, error: str | None) -> None:
        """FROZEN -> RUNNING under this operation: the freeze gave way to traffic (`error` None,
        recorded as 'abandoned') or the atelet could not stop the sandbox (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchval(Q["rollback_actor_freeze"], ref.atespace, ref.name, operation_id, error)
            outcome = "abandoned" if error is None else "failed"
            why = error if error is not None else "a request came in: the actor keeps running"
            await connection.execute(Q["finish_operation"], operation_id, outcome, why, None)
            if error is None:  # the request in flight proves it busy now: its idle time starts again
                await connection.execute(Q["touch_actors"], [ref.atespace], [ref.name])
