"""Pressure: which actors ate may move off their worker to make room for a resume that found none
(issue 27; ARCHITECTURE.md "pressure suspend").

Only actors whose template opted in (`suspendUnderPressure`, `domain.idle.PressurePolicy`), RUNNING
or FROZEN with no operation in flight, that have run at least their template's
`minimumRunSeconds`, on a worker that would take the resuming actor once free (placement's checks
1, 2, 3, 4, 5 and the worker's size: `domain.placement.fits`); frozen ones first, then the
longest idle. A worker holds one actor, so moving its actor frees it whole. An actor with a
request in flight is never moved: the suspend that moves it gives way to the request (`if_idle`),
and the caller tries the next one.

The worker of the actor chosen (`claim`) is kept for `RESERVATION_SECONDS` (`reserve_worker`)
for the oldest resume waiting for room that it would take (`store.room_queue`; often the one
that chose it): no other placement takes it once it is empty, and no other resume's pressure move
chooses its actor, so two resumes short of room never move the same actor, nor take the worker
the other one emptied, and resumes short of room are served in the order they came.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.idle import parse_pressure_policy
from domain.operations.pressure import RESERVATION_SECONDS, PressureVictimRef, PressureVictims
from domain.placement import Demand, WorkerShape, fits
from domain.refs import ActorRef
from store.errors import NotFound
from store.placement import demand_of
from store.records import spec_of
from store.resumes import restore_point
from store.room_queue import RoomQueue, Waiter
from store.snapshots import Snapshots
from store.sql import QUERIES as Q
from store.worker_view import worker_shape


class Pressure:
    """victims, and claim (the actor to move, its worker kept for the oldest waiter it would take)."""

    def __init__(self, pool: asyncpg.Pool, snapshots: Snapshots, room_queue: RoomQueue) -> None:
        self.pool = pool
        self.snapshots = snapshots
        self.room_queue = room_queue

    async def victims(self, ref: ActorRef, limit: int = 5, scan: int = 200) -> list[PressureVictimRef]:
        """Up to `limit` actors whose move would make room for `ref`'s resume, best first (module
        doc), each with how it is moved (its template's Suspend or Pause) and its worker's pool.
        Workers kept for another resume are left out; nothing is reserved.

        Args:
            ref: the actor a resume found no room for.
            limit: how many to return.
            scan: how many opted-in candidates to look at (frozen first, then the longest idle).

        Raises:
            NotFound: unknown actor.
        """
        async with self.pool.acquire() as connection:
            demand, rows = await self._candidates(connection, ref, scan)
        return [c.victim for c in _fitting(rows, demand)[:limit]]

    async def claim(
        self,
        ref: ActorRef,
        tried: list[ActorRef],
        operation_id: str = "",
        seconds: float = RESERVATION_SECONDS,
    ) -> PressureVictims:
        """The best actor to move for `ref`'s resume that it has not `tried`, its worker kept for
        `seconds` (module doc).

        With `operation_id` (the resume's run) the resume joins the room queue
        (`store.room_queue`), and the worker is kept for the oldest live waiter it would take,
        this resume or an older one (`PressureVictims.room_for`); a resume that has a worker kept
        for it already is given none. Without, for this resume (runs recorded before the queue).

        Raises:
            NotFound: unknown actor.
        """
        skip = set(tried)
        holder = ref.workflow_id
        async with self.pool.acquire() as connection:
            demand, rows = await self._candidates(connection, ref)
            waiters: list[Waiter] | None = None
            if operation_id:
                since = await self.room_queue.join(connection, holder, operation_id, demand)
                waiters = await self.room_queue.ahead(connection, since)
            for candidate in _fitting(rows, demand):
                if candidate.victim.actor in skip:
                    continue
                waiter = Waiter(holder, operation_id, demand)
                if waiters is not None:
                    found = next((w for w in waiters if _takes(candidate, w.demand)), None)
                    if found is None:
                        continue
                    waiter = found
                if await connection.fetchval(Q["reserve_worker"], candidate.worker_id, waiter.holder, seconds) is None:
                    continue  # kept for another resume since the read
                if waiter.holder == holder:
                    return PressureVictims([candidate.victim])
                return PressureVictims([candidate.victim], room_for=waiter.actor, room_for_operation=waiter.operation_id)
        return PressureVictims([])

    async def _candidates(
        self, connection: asyncpg.Connection, ref: ActorRef, scan: int = 200
    ) -> tuple[Demand, list[asyncpg.Record]]:
        """`ref`'s demand and the `pressure_candidates` rows for it (at most `scan`)."""
        async with connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)  # its own resume holds it
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            snapshot_id, pinned = restore_point(actor)
            snapshot = await self.snapshots.ref(connection, snapshot_id) if snapshot_id else None
            demand = demand_of(f"the actor {ref.key}", spec_of(actor), actor["worker_selector"], snapshot, pinned)
            rows = await connection.fetch(Q["pressure_candidates"], ref.atespace, ref.name, scan, ref.workflow_id)
        return demand, list(rows)


@dataclass(frozen=True)
class _Candidate:
    """An actor that may be moved, and the worker its move empties."""

    victim: PressureVictimRef
    worker_id: int
    shape: WorkerShape
    node: str


def _takes(candidate: _Candidate, demand: Demand) -> bool:
    """Whether the worker `candidate`'s move empties would take `demand` (its node, if pinned)."""
    return (demand.node is None or candidate.node == demand.node) and fits(candidate.shape, demand)


def _fitting(rows: list[asyncpg.Record], demand: Demand) -> list[_Candidate]:
    """Of `pressure_candidates` rows, in order, those whose move makes room for `demand` and whose
    template's policy allows it now."""
    found: list[_Candidate] = []
    for row in rows:
        try:
            policy = parse_pressure_policy(row["pressure"])
        except ValueError:
            continue
        if not policy.enabled or row["running_seconds"] < policy.minimum_run_seconds:
            continue
        candidate = _Candidate(
            victim=PressureVictimRef(actor=ActorRef(row["atespace"], row["name"]), action=policy.action.value, pool=row["pool"]),
            worker_id=int(row["worker_id"]),
            shape=worker_shape(row),
            node=str(row["node"]),
        )
        if _takes(candidate, demand):
            found.append(candidate)
    return found
