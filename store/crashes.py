"""What every crash of a RUNNING (or UNREACHABLE) actor does inside its transaction: the actor
becomes CRASHED, its place is freed, and its worker is held out of placement until the router
replicas drained the actor.

Why the hold: a router may still hold the crashed actor's worker address (a request looked up
before the crash and still sending its body, a notification not yet read). A suspend drains the
routers before its checkpoint; a crash has no such moment, so it records the same drain when it
happens and keeps the worker UNAVAILABLE until every live replica acknowledged it, or until that
replica's drain timeout plus `DRAIN_ACK_MARGIN_SECONDS` ran out (the bound the drain step before a
checkpoint waits; `MAX_DRAIN_WAIT_SECONDS` at most). Only then may another actor be placed there,
so no request of the crashed actor reaches its successor. Each heartbeat of the node re-applies
the hold (`hold_router_draining_workers`) and forgets it once done.
"""

from __future__ import annotations

import asyncpg

from domain.operations.router_drain import DRAIN_ACK_MARGIN_SECONDS, MAX_DRAIN_WAIT_SECONDS
from domain.refs import ActorRef
from store.router_drains import record_drain
from store.sql import QUERIES as Q


def drain_operation_id(ref: ActorRef, version: int) -> str:
    """The operation ID of the router drain of `ref`'s crash at actor version `version` (one
    drain per crash; the same crash recorded again gets the same drain)."""
    return f"crash/{ref.key}/{version}"


async def crash_on_worker(
    connection: asyncpg.Connection, ref: ActorRef, worker_id: int, reason: str, holder: str | None = None
) -> bool:
    """RUNNING or UNREACHABLE on `worker_id` -> CRASHED with `reason`; its place (held by
    `holder`, the actor's own by default) freed; the routers told to drain it and the worker held
    until they did. Runs in the caller's transaction.

    Returns:
        Whether the actor was crashed (False: it is not RUNNING or UNREACHABLE on that worker).
    """
    version = await connection.fetchval(Q["crash_actor_on_worker"], ref.atespace, ref.name, worker_id, reason)
    if version is None:
        return False
    await connection.execute(Q["delete_placement"], holder or ref.workflow_id)
    await hold_for_drain(connection, ref, worker_id, version)
    return True


async def hold_for_drain(connection: asyncpg.Connection, ref: ActorRef, worker_id: int | None, version: int) -> None:
    """Record the router drain of `ref`'s crash at `version` and hold `worker_id` (None: the
    worker is gone) UNAVAILABLE until the live replicas drained it."""
    drain_id = await record_drain(connection, ref, drain_operation_id(ref, version))
    if worker_id is not None:
        await connection.execute(
            Q["hold_worker_for_router_drain"],
            worker_id,
            drain_id,
            f"held until every router replica has drained {ref.key} (its sandbox crashed on this worker)",
        )


async def hold_router_draining_workers(connection: asyncpg.Connection, node: str) -> None:
    """At a heartbeat of `node` (after its workers were registered ACTIVE): keep UNAVAILABLE
    those whose crashed actor a live replica has yet to drain, within the bound; forget the
    drains that are done."""
    await connection.execute(Q["hold_router_draining_workers"], node, DRAIN_ACK_MARGIN_SECONDS, MAX_DRAIN_WAIT_SECONDS)
    await connection.execute(
        Q["release_router_drained_workers"], node, DRAIN_ACK_MARGIN_SECONDS, MAX_DRAIN_WAIT_SECONDS
    )
