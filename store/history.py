"""The history of operations of each actor (what `ate describe actor` shows)."""

from __future__ import annotations

import asyncpg

from domain.refs import ActorRef
from store.records import OperationRecord
from store.sql import QUERIES as Q


class OperationHistory:
    """finish and of_actor."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def finish(self, operation_id: str, outcome: str, error: str | None, worker: str | None) -> None:
        """Record an operation's outcome (no-op when already recorded)."""
        await self.pool.execute(Q["finish_operation"], operation_id, outcome, error, worker)

    async def of_actor(self, ref: ActorRef, limit: int = 10) -> list[OperationRecord]:
        """The last `limit` operations of an actor, newest first."""
        rows = await self.pool.fetch(Q["actor_operations"], ref.atespace, ref.name, limit)
        return [OperationRecord(**dict(r)) for r in rows]
