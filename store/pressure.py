"""Pressure: which actors ate may move off their worker to make room for a resume that found none
(issue 27; ARCHITECTURE.md "pressure suspend").

Only actors whose template opted in (`suspendUnderPressure`, `domain.idle.PressurePolicy`), RUNNING
or FROZEN with no operation in flight, that have run at least their template's
`minimumRunSeconds`, on a worker that would take the resuming actor once free (placement's checks
1, 2, 3, 4, 5 and the worker's size: `domain.placement.fits`); frozen ones first, then the
longest idle. A worker holds one actor, so moving its actor frees it whole. An actor with a
request in flight is never moved: the suspend that moves it gives way to the request (`if_idle`),
and the caller tries the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.idle import IdleAction, parse_pressure_policy
from domain.placement import WorkerShape, fits
from domain.refs import ActorRef
from domain.states import ActorState
from store.errors import NotFound
from store.placement import demand_of
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class PressureVictim:
    """An actor that may be moved to make room: how (Suspend or Pause, its template's choice),
    the pool of the worker it frees, its state, and how long it has been idle (seconds)."""

    actor: ActorRef
    action: IdleAction
    pool: str
    state: ActorState
    idle_seconds: float


class Pressure:
    """victims."""

    def __init__(self, pool: asyncpg.Pool, snapshots: Snapshots) -> None:
        self.pool = pool
        self.snapshots = snapshots

    async def victims(self, ref: ActorRef, limit: int = 5, scan: int = 200) -> list[PressureVictim]:
        """Up to `limit` actors whose move would make room for `ref`'s resume, best first (module doc).

        Args:
            ref: the actor a resume found no room for.
            limit: how many to return.
            scan: how many opted-in candidates to look at (frozen first, then the longest idle).

        Raises:
            NotFound: unknown actor.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)  # its own resume holds it
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            local_id = actor["local_snapshot_id"] or actor["pending_upload_snapshot_id"]
            snapshot_id = local_id or actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
            snapshot = await self.snapshots.ref(connection, snapshot_id) if snapshot_id else None
            pinned = actor["pinned_node"] if local_id else None
            demand = demand_of(f"the actor {ref.key}", spec_of(actor), actor["worker_selector"], snapshot, pinned)
            rows = await connection.fetch(Q["pressure_candidates"], ref.atespace, ref.name, scan)
        found: list[PressureVictim] = []
        for row in rows:
            try:
                policy = parse_pressure_policy(row["pressure"])
            except ValueError:
                continue
            if not policy.enabled or row["running_seconds"] < policy.minimum_run_seconds:
                continue
            if demand.node is not None and row["node"] != demand.node:
                continue
            shape = WorkerShape.of(
                state=row["worker_state"], sandbox_class=row["sandbox_class"], labels=row["labels"] or {},
                runsc_version=row["runsc_version"], places=int(row["places"]), cpu_millis=int(row["cpu_millis"]),
                memory_bytes=int(row["memory_bytes"]), node=str(row["node"]), state_reason=row["state_reason"],
            )  # fmt: skip
            if not fits(shape, demand):
                continue
            victim = ActorRef(row["atespace"], row["name"])
            found.append(PressureVictim(victim, policy.action, row["pool"], ActorState(row["state"]), row["idle_seconds"]))
            if len(found) >= limit:
                break
        return found
