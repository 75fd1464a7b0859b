"""Router replicas and the drains of an actor's traffic before its checkpoint.

A replica heartbeats (`heartbeat`) and gets back the drains it has not acknowledged; the
`drain_routers` step records a drain (`request`, which also NOTIFYs `ate_router_drains`) and
polls `waiting` until every live replica acknowledged it (`acknowledge`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from domain.changes import format_drain
from domain.refs import ActorRef
from store.errors import NotFound
from store.sql import QUERIES as Q


async def record_drain(
    connection: asyncpg.Connection, actor: ActorRef, operation_id: str, if_idle: bool = False
) -> int:
    """Record the drain of `actor` for operation `operation_id` (the same row for a retry of that
    operation; `if_idle`: an idle action's, which a busy replica refuses) and NOTIFY the listening
    replicas (delivered when the caller's transaction commits); return the drain's ID."""
    row = await connection.fetchrow(Q["record_router_drain"], operation_id, actor.atespace, actor.name, if_idle)
    drain_id: int = row["id"]
    await connection.execute(Q["notify_router_drain"], format_drain(drain_id, actor, row["if_idle"]))
    return drain_id


@dataclass(frozen=True)
class PendingDrain:
    """A drain a replica has yet to carry out and acknowledge (`if_idle`: an idle action's)."""

    drain_id: int
    actor: ActorRef
    if_idle: bool = False


@dataclass(frozen=True)
class RouterReplica:
    """A registered router replica; `live` while its lease runs."""

    name: str
    started_at: datetime
    last_seen_at: datetime
    lease_seconds: float
    drain_timeout_seconds: float
    live: bool


@dataclass(frozen=True)
class DrainProgress:
    """Where a drain stands: live replicas that acknowledged it, those that have not, and the
    longest drain timeout among the latter (seconds; 0 when none is missing); `busy`: those of
    `acknowledged` that refused an if-idle drain (a request of the actor in flight there)."""

    acknowledged: list[str]
    missing: list[str]
    longest_timeout_seconds: float
    busy: list[str] = field(default_factory=list)


class RouterDrains:
    """heartbeat, release, list, request, waiting and acknowledge."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def heartbeat(self, replica: str, lease_seconds: float, drain_timeout_seconds: float) -> list[PendingDrain]:
        """Register `replica` or refresh its lease; return the drains it has not acknowledged
        (those of the last 5 minutes, oldest first)."""
        async with self.pool.acquire() as connection:
            await connection.fetchval(Q["heartbeat_router"], replica, lease_seconds, drain_timeout_seconds)
            await connection.execute(Q["forget_silent_routers"])
            rows = await connection.fetch(Q["pending_router_drains"], replica)
        return [PendingDrain(r["id"], ActorRef(r["atespace"], r["name"]), r["if_idle"]) for r in rows]

    async def release(self, replica: str) -> None:
        """`replica` stopped cleanly and gives its lease back: from now on no drain waits for it and
        no worker is held for it (as once a silent replica's lease ran out).

        Raises:
            NotFound: no replica of that name is registered.
        """
        async with self.pool.acquire() as connection:
            if await connection.fetchval(Q["release_router_lease"], replica) is None:
                raise NotFound(f"router replica {replica} is not registered")

    async def replicas(self) -> list[RouterReplica]:
        """Every registered replica, by name."""
        async with self.pool.acquire() as connection:
            rows = await connection.fetch(Q["list_routers"])
        return [
            RouterReplica(
                r["name"], r["started_at"], r["last_seen_at"], r["lease_seconds"], r["drain_timeout_seconds"], r["live"]
            )
            for r in rows
        ]

    async def request(self, actor: ActorRef, operation_id: str, if_idle: bool = False) -> int:
        """Record the drain of `actor` for operation `operation_id` (the same ID again for a
        retry of that operation; `if_idle`: an idle action's, refused by a busy replica) and
        NOTIFY the listening replicas; return the drain's ID."""
        async with self.pool.acquire() as connection:
            await connection.execute(Q["prune_router_drains"])
            return await record_drain(connection, actor, operation_id, if_idle)

    async def waiting(self, drain_id: int) -> DrainProgress:
        """Which live replicas have acknowledged drain `drain_id` and which have not."""
        async with self.pool.acquire() as connection:
            rows = await connection.fetch(Q["router_drain_waiting"], drain_id)
        missing = [r for r in rows if not r["acked"]]
        return DrainProgress(
            acknowledged=[r["name"] for r in rows if r["acked"]],
            missing=[r["name"] for r in missing],
            longest_timeout_seconds=max((r["drain_timeout_seconds"] for r in missing), default=0.0),
            busy=[r["name"] for r in rows if r["busy"]],
        )

    async def acknowledge(self, drain_id: int, replica: str, busy: bool = False) -> None:
        """Record that `replica` drained `drain_id`, or (`busy`) refused an if-idle drain because
        a request of the actor was in flight there (idempotent: the first answer stays).

        Raises:
            NotFound: no such drain (it is older than an hour, or never was).
        """
        async with self.pool.acquire() as connection:
            if await connection.fetchval(Q["ack_router_drain"], drain_id, replica, busy) is None:
                if not await connection.fetchval(Q["router_drain_exists"], drain_id):
                    raise NotFound(f"router drain {drain_id} not found (drains are kept for an hour)")
