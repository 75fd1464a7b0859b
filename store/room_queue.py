"""The room queue: resumes that found no worker with room, served in the order they came (issue 27).

A resume short of room joins the queue (`join`, from when it first found none, kept across its
callers' retries as long as it keeps trying: `domain.operations.pressure.WAITER_LIVE_SECONDS`)
with what its placement asks and the pool it would take. A pressure move keeps the worker it
empties for the oldest live waiter that worker would take (`ahead`, read by `store.pressure`), so
a request parked for room is not passed by later ones. A bind leaves the queue (the
`leave_room_queue` query, run by `store.placement`); so does a resume that stops waiting
(`leave`). The live waiters by pool are the demand no worker could take (`waiting_by_pool`, the
api-server's `ate_resumes_waiting_for_room`), what an autoscaler of the WorkerPool reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import asyncpg

from domain.operations.pressure import WAITER_LIVE_SECONDS
from domain.placement import Demand, fits
from domain.refs import ActorRef
from store.sql import QUERIES as Q
from store.worker_view import worker_shape

AHEAD_LIMIT = 50
"""How many of the oldest waiters a move looks at for the one its worker is kept for."""


@dataclass(frozen=True)
class Waiter:
    """A resume waiting for room: its holder (`actor/<atespace>/<name>`), its run, and its demand."""

    holder: str
    operation_id: str
    demand: Demand

    @property
    def actor(self) -> ActorRef:
        """The actor whose resume waits."""
        _, atespace, name = self.holder.split("/", 2)
        return ActorRef(atespace, name)


def demand_document(demand: Demand) -> str:
    """A demand as the JSON text of `room_waiters.demand`."""
    return json.dumps(asdict(demand))


def demand_of_document(document: Any) -> Demand:
    """A demand back from `room_waiters.demand` (a JSON text or an already decoded object)."""
    data = json.loads(document) if isinstance(document, str) else dict(document)
    data["selector"] = tuple((str(k), str(v)) for k, v in data["selector"])
    return Demand(**data)


class RoomQueue:
    """join, ahead, leave, release and waiting_by_pool (module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def join(self, connection: asyncpg.Connection, holder: str, operation_id: str, demand: Demand) -> datetime:
        """Put `holder`'s resume (run `operation_id`) in the queue, or refresh its place there.

        Returns:
            When it began waiting (now, unless it kept trying since an earlier join).
        """
        pool = await self._pool_for(connection, demand)
        since: datetime = await connection.fetchval(
            Q["join_room_queue"], holder, operation_id, demand_document(demand), pool, WAITER_LIVE_SECONDS
        )
        return since

    async def ahead(self, connection: asyncpg.Connection, since: datetime) -> list[Waiter]:
        """The live waiters that began waiting no later than `since` and have no worker kept for
        them now, oldest first (at most AHEAD_LIMIT)."""
        rows = await connection.fetch(Q["room_waiters_ahead"], WAITER_LIVE_SECONDS, since, AHEAD_LIMIT)
        return [Waiter(row["holder"], row["operation_id"], demand_of_document(row["demand"])) for row in rows]

    async def leave(self, actor: ActorRef) -> None:
        """`actor`'s resume stopped waiting: out of the queue, and the workers kept for it are free."""
        await self.pool.execute(Q["leave_room_queue"], actor.workflow_id)

    async def release(self, victims: list[ActorRef]) -> None:
        """The moves of `victims` gave way or failed: the workers those still rest on are kept
        for nobody."""
        if victims:
            await self.pool.execute(
                Q["release_victims_room"], [v.atespace for v in victims], [v.name for v in victims]
            )

    async def waiting_by_pool(self) -> dict[str, int]:
        """The live waiters by the pool they would take ('' when no pool's workers would)."""
        return {row["pool"]: int(row["waiting"]) for row in await self.pool.fetch(Q["room_waiters_by_pool"], WAITER_LIVE_SECONDS)}

    @staticmethod
    async def _pool_for(connection: asyncpg.Connection, demand: Demand) -> str:
        """The first pool (by name) with a worker that would take `demand` once empty; ''."""
        for row in await connection.fetch(Q["worker_pool_shapes"]):
            if fits(worker_shape(row), demand):
                return str(row["pool"])
        return ""
