"""The history of operations of each actor (what `ate describe actor` shows)."""

from __future__ import annotations

from datetime import datetime

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

    async def prune(self, older_than: datetime, keep_per_actor: int, batch: int = 5000) -> int:
        """Deletes finished operations that finished before `older_than`, and those beyond each
        actor's newest `keep_per_actor` finished ones, `batch` at a time; an operation still
        running stays. Returns how many went."""
        removed = 0
        while True:
            done = await self.pool.execute(Q["prune_operations"], older_than, keep_per_actor, batch)
            count = int(done.split()[-1])
            removed += count
            if count < batch:
                return removed

    async def of_actor(self, ref: ActorRef, limit: int = 10) -> list[OperationRecord]:
        """The last `limit` operations of an actor, newest first."""
        rows = await self.pool.fetch(Q["actor_operations"], ref.atespace, ref.name, limit)
        return [OperationRecord(**dict(r)) for r in rows]
