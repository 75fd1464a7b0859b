"""Placement: the checks, the less loaded of two candidates, the bind in one transaction
(ARCHITECTURE.md, "Placement"), and the "no room" message naming, for each check that removed
workers, how many it removed. The rules are `domain.placement`; the candidates come from the
in-memory `WorkerView`; the bind locks the worker row and checks it again, so a stale view never
overbooks a worker or binds one that left. `place` runs inside the caller's transaction (the
caller holds the actor's or template's row lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import asyncpg

from domain.placement import Demand, Usage, WorkerShape, no_room_message, refusal
from domain.refs import SnapshotRef, WorkerRef
from domain.states import SnapshotScope
from domain.templates import ActorTemplateSpec
from store.errors import NoCapacity, NoMatchingWorker, NotFound
from store.sql import QUERIES as Q
from store.worker_view import WorkerView

PLACEMENT_ATTEMPTS = 5
"""Binds that may fail (another placement took the worker, or the view was stale) before giving up."""


def demand_of(
    label: str,
    spec: ActorTemplateSpec,
    actor_selector: Mapping[str, str],
    snapshot: SnapshotRef | None = None,
    node: str | None = None,
) -> Demand:
    """What placing `label` asks for.

    Args:
        label: names the holder in messages ("the actor demo/c1").
        spec: the template (sandbox class, workerSelector, limits).
        actor_selector: the actor's worker_selector.
        snapshot: what the resume restores (None: a fresh boot); a FULL one needs the runtime that
            wrote it (check 4: a runsc build, or a VMM's version), when its row records one.
        node: the node the actor's LOCAL snapshot pins it to (check 3).
    """
    needs = snapshot.runsc_version if snapshot is not None and snapshot.scope == SnapshotScope.FULL else None
    return Demand.of(
        label=label,
        sandbox_class=spec.sandbox_class,
        selectors=(spec.worker_selector, actor_selector),
        cpu_millis=spec.limits.cpu_millis,
        memory_bytes=spec.limits.memory_bytes,
        runsc_version=needs,
        node=node,
    )


class Placement:
    """Chooses and binds workers; `pool` serves the reads made outside a transaction, `view` the
    choice (see `WorkerView`)."""

    def __init__(self, pool: asyncpg.Pool, view: WorkerView | None = None) -> None:
        self.pool = pool
        self.view = view or WorkerView(pool)

    async def worker_ref(self, connection: asyncpg.Connection, worker_id: int) -> WorkerRef:
        """The worker with that id and its atelet's address.

        Raises:
            NotFound: no such worker.
        """
        row = await connection.fetchrow(Q["get_worker_ref"], worker_id)
        if row is None:
            raise NotFound(f"worker {worker_id} not found")
        return WorkerRef(
            worker_id=row["id"],
            pool=row["pool"],
            name=row["name"],
            node=row["node"],
            ip=row["ip"],
            atelet_address=row["atelet_address"],
        )

    async def place(
        self, connection: asyncpg.Connection, *, holder: str, operation_id: str, demand: Demand, waited: bool = False
    ) -> int:
        """Choose a worker and bind `holder` to it inside the caller's transaction.

        A worker kept for `holder` (a pressure move emptied it for this resume, `store.pressure`)
        is taken first. Otherwise, of two random candidates from the view (every check passed,
        kept for no one), the one whose node is less loaded wins (power of two choices); its row
        is locked and every check made again on what the row says; a worker that fails is left
        out and another pair drawn. Once bound, `holder` leaves the room queue (`waited`: its
        resume joined it, `store.room_queue`) and the workers kept for it are free again.

        Returns:
            The bound worker's id.

        Raises:
            NoCapacity: no worker passes; the message names, per check, how many it removed.
            NoMatchingWorker: the same, when configuration (class, runtime, labels) rules out
                every registered worker: waiting will not help.
            TimeoutError: the view could not be loaded (Postgres unreachable); retry.
        """
        view = self.view
        await view.ready()
        excluded: set[int] = set()
        failed = 0
        synced = False
        while failed < PLACEMENT_ATTEMPTS:
            picks = view.reserved_workers(holder, demand, excluded)[:1] or view.sample(demand, excluded)
            if not picks:
                if synced:
                    break
                await view.sync()  # the view may not have seen a worker that left a place free
                synced = True
                continue
            chosen = min(picks, key=lambda w: view.load(w, demand))
            if await self._bind(connection, chosen.worker_id, holder, operation_id, demand):
                if waited or view.has_reservations(holder):  # a worker kept for it is one of these
                    await connection.execute(Q["leave_room_queue"], holder)
                view.hold(chosen.worker_id, demand.usage, holder)
                return chosen.worker_id
            excluded.add(chosen.worker_id)
            view.refresh(chosen.worker_id)
            failed += 1
        if not synced:
            await view.sync()
        tally = view.tally(demand)
        raise (NoMatchingWorker if tally.permanent else NoCapacity)(no_room_message(tally, demand))

    async def _bind(
        self, connection: asyncpg.Connection, worker_id: int, holder: str, operation_id: str, demand: Demand
    ) -> bool:
        """Lock the worker, check it again from its row, and bind: whether it was bound (not when
        it is kept for another resume)."""
        row = await connection.fetchrow(Q["lock_worker"], worker_id)
        if row is None:  # the worker left (its node was retired)
            return False
        if row["reserved_for"] not in (None, holder):
            return False
        # Its own statement, after the lock: under READ COMMITTED a statement sees what was
        # committed when it started, so counting in the locking statement would miss a bind
        # committed while it waited for the lock (and overbook).
        used = await connection.fetchrow(Q["worker_usage"], worker_id)
        shape = WorkerShape.of(
            state=row["state"],
            sandbox_class=row["sandbox_class"],
            labels=row["labels"] or {},
            runsc_version=row["runsc_version"],
            places=row["places"],
            cpu_millis=row["cpu_millis"],
            memory_bytes=row["memory_bytes"],
        )
        usage = Usage(int(used["used_places"]), int(used["used_cpu"]), int(used["used_memory"]))
        if refusal(shape, demand.node is None or row["node"] == demand.node, usage, demand) is not None:
            return False
        await connection.execute(
            Q["insert_placement"], holder, worker_id, operation_id, demand.cpu_millis, demand.memory_bytes
        )
        return True

    async def has_candidate(self, demand: Demand) -> bool:
        """Whether some worker passes every check for `demand` now (as the view sees it)."""
        await self.view.ready()
        return bool(self.view.sample(demand, set(), k=1))

    async def elsewhere(self, demand: Demand) -> bool:
        """Whether a worker on any node passes every check (the pinned node set aside)."""
        return await self.has_candidate(replace(demand, node=None))

    async def held(self, holder: str, worker_id: int, operation_id: str) -> bool:
        """Whether the operation `operation_id` still acts on `holder`'s place on the worker.

        True when the place was bound by this operation (a resume, a golden boot), or when the
        actor is bound to that worker under this operation (a suspend of a resumed actor).
        """
        if await self.pool.fetchval(Q["placement_held"], holder, worker_id, operation_id):
            return True
        kind, _, rest = holder.partition("/")
        if kind != "actor":
            return False
        atespace, _, name = rest.partition("/")
        return bool(await self.pool.fetchval(Q["actor_held_by_operation"], atespace, name, worker_id, operation_id))
