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

import asyncpg

from domain.idle import parse_pressure_policy
from domain.operations.pressure import PressureVictimRef
from domain.placement import fits
from domain.refs import ActorRef
from store.errors import NotFound
from store.placement import demand_of
from store.records import spec_of
from store.resumes import restore_point
from store.snapshots import Snapshots
from store.sql import QUERIES as Q
from store.worker_view import worker_shape


class Pressure:
    """victims."""

    def __init__(self, pool: asyncpg.Pool, snapshots: Snapshots) -> None:
        self.pool = pool
        self.snapshots = snapshots

    async def victims(self, ref: ActorRef, limit: int = 5, scan: int = 200) -> list[PressureVictimRef]:
        """Up to `limit` actors whose move would make room for `ref`'s resume, best first (module
        doc), each with how it is moved (its template's Suspend or Pause) and its worker's pool.

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
            snapshot_id, pinned = restore_point(actor)
            snapshot = await self.snapshots.ref(connection, snapshot_id) if snapshot_id else None
            demand = demand_of(f"the actor {ref.key}", spec_of(actor), actor["worker_selector"], snapshot, pinned)
            rows = await connection.fetch(Q["pressure_candidates"], ref.atespace, ref.name, scan)
        found: list[PressureVictimRef] = []
        for row in rows:
            try:
                policy = parse_pressure_policy(row["pressure"])
            except ValueError:
                continue
            if not policy.enabled or row["running_seconds"] < policy.minimum_run_seconds:
                continue
            if demand.node is not None and row["node"] != demand.node:
                continue
            if not fits(worker_shape(row), demand):
                continue
            victim = ActorRef(row["atespace"], row["name"])
            found.append(PressureVictimRef(actor=victim, action=policy.action.value, pool=row["pool"]))
            if len(found) >= limit:
                break
        return found
