"""Store transitions beyond resume and suspend: revert, crash, node liveness and drain, tags,
operation history and snapshot garbage collection.

Each method is idempotent for its operation ID (or naturally idempotent), so the activities
calling them can be retried after any crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from activities.store.errors import AlreadyExists, FailedPrecondition, NotFound, VersionConflict
from activities.store.placement import NODE_LIVENESS_SECONDS, PlacementMixin
from activities.store.sql import QUERIES as Q
from domain.operations.drain import DrainPlan
from domain.operations.revert import RevertPlan
from domain.operations.snapshot_gc import GarbageSnapshot
from domain.refs import ActorRef, WorkerRef
from domain.states import ActorState, SnapshotStorage

REVERTABLE = frozenset(
    {ActorState.RUNNING, ActorState.PAUSED, ActorState.CRASHED, ActorState.RESUMING, ActorState.SUSPENDING,
     ActorState.PAUSING, ActorState.REVERTING}
)  # fmt: skip
"""States RevertActor starts from (a stuck RESUMING/SUSPENDING/PAUSING; REVERTING: a revert that
died is taken over)."""

SETTLED_SECONDS = 10.0
"""A RUNNING actor its atelet reports absent is crashed only if it has been RUNNING this long,
so a heartbeat taken just before a restore finished cannot crash a fresh actor."""


@dataclass
class FencingOrder:
    """A sandbox an atelet must stop: the control plane places nothing of it on that worker."""

    worker: str
    atespace: str
    name: str


@dataclass
class OperationRecord:
    """One past or running operation of an actor."""

    operation_id: str
    operation: str
    outcome: str | None
    worker: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass
class TagRecord:
    """A tag: a named pointer to a COMPLETED snapshot."""

    atespace: str
    name: str
    snapshot_id: int
    source_actor: str
    generation: int
    scope: str
    created_at: datetime
    template: str | None = None


def _held_by(holder: str, atespace: str, name: str) -> bool:
    """Whether a placement holder is the sandbox an atelet reports as (atespace, name)."""
    if holder == f"actor/{atespace}/{name}":
        return True
    return name.startswith("golden-") and holder == f"template/{atespace}/{name.removeprefix('golden-')}"


class LifecycleMixin(PlacementMixin):
    """Revert, crash, node, tag, history and GC transitions (mixed into `Store`)."""

    # ---- RevertActor ------------------------------------------------------------------------

    async def begin_revert(self, ref: ActorRef, operation_id: str) -> RevertPlan:
        """Mark REVERTING (from any revertable state) and drop the in-progress snapshot.

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: `actor is not in a revertable state (state: X)`.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            # An async-suspended actor whose snapshot is not uploaded yet may be pinned to a dead
            # node: reverting drops that snapshot and unpins it.
            pending_upload = state == ActorState.SUSPENDED and actor["pending_upload_snapshot_id"] is not None
            if state == ActorState.REVERTING and actor["operation_id"] == operation_id:
                from_state = "REVERTING"
            elif state in REVERTABLE or pending_upload:
                from_state = state
                await connection.execute(Q["mark_actor_reverting"], ref.atespace, ref.name, operation_id)
                if actor["in_progress_snapshot_id"] is not None:  # a PENDING snapshot is discarded
                    await connection.execute(Q["delete_pending_snapshot"], actor["in_progress_snapshot_id"])
                await connection.execute(
                    Q["insert_operation"], operation_id, ref.atespace, ref.name, "RevertActor", None
                )
            else:
                raise FailedPrecondition(
                    f"actor {ref.key} is not in a revertable state (state: {state}); RevertActor takes "
                    "RUNNING, PAUSED, CRASHED, or a stuck RESUMING/SUSPENDING/PAUSING actor",
                    {"state": state},
                )
            worker = None
            alive = False
            if actor["worker_id"] is not None:
                worker = await self._worker_ref(connection, actor["worker_id"])
                alive = bool(await connection.fetchval(Q["node_alive"], worker.node, NODE_LIVENESS_SECONDS))
            return RevertPlan(from_state=from_state, worker=worker, node_alive=alive)

    async def fence_worker(self, worker_id: int, reason: str) -> None:
        """Take a worker out of placement: its node could not confirm the sandbox stopped."""
        await self.pool.execute(Q["fence_worker"], worker_id, reason)

    async def finish_revert(self, ref: ActorRef, operation_id: str, note: str) -> None:
        """REVERTING -> SUSPENDED with the last COMPLETED snapshot; place freed (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["mark_actor_reverted"], ref.atespace, ref.name, operation_id, note)
            placement = await connection.fetchrow(Q["get_placement"], ref.workflow_id)
            if placement is not None:
                await connection.execute(Q["delete_placement"], ref.workflow_id)
            if updated is None:
                row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
                if row is None or row["state"] != ActorState.SUSPENDED:
                    raise FailedPrecondition(f"actor {ref.key} is no longer reverting under operation {operation_id}")
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)

    # ---- crashes and nodes ------------------------------------------------------------------

    async def crash_actor(self, ref: ActorRef, worker_id: int, reason: str) -> bool:
        """RUNNING on `worker_id` -> CRASHED with the reason, place freed. Returns whether it applied."""
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["crash_actor_on_worker"], ref.atespace, ref.name, worker_id, reason)
            if updated is None:
                return False
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            return True

    async def record_sandbox_exit(self, node: str, worker: str, ref: ActorRef, reason: str) -> bool:
        """An atelet saw a sandbox exit on its own: its RUNNING actor becomes CRASHED.

        Returns:
            Whether an actor was marked CRASHED (False when it was not RUNNING there: e.g. an
            exit during a suspend, which the suspend itself handles).
        """
        worker_id = await self.pool.fetchval(Q["worker_by_name"], node, worker)
        if worker_id is None:
            raise NotFound(f"worker {worker} of node {node} not found")
        crashed = await self.crash_actor(ref, worker_id, f"sandbox exited on worker {worker} ({node}): {reason}")
        if crashed:
            # The atelet keeps an exited sandbox's record (and refuses the worker to anyone else)
            # until it is told to stop it: keep the worker out of placement until a heartbeat
            # reports it idle (the heartbeat's fencing order makes the atelet free it).
            await self.fence_worker(worker_id, f"fenced: the sandbox of {ref.key} exited; freed at the next heartbeat")
        return crashed

    async def reconcile_node(self, node: str, reported: dict[str, tuple[str, str] | None]) -> list[FencingOrder]:
        """Compare what an atelet runs with the placements on its workers.

        Args:
            node: the node.
            reported: worker name -> (atespace, name) of the sandbox on it, or None when idle.

        Returns:
            Sandboxes the atelet must stop (it runs them, nothing is placed there for them);
            those workers stay UNAVAILABLE (fenced) until they report idle. RUNNING actors whose
            sandbox the atelet no longer has (and that have been RUNNING for a while) become
            CRASHED, and their place is freed.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            return await self._reconcile(connection, node, reported)

    async def _reconcile(
        self, connection: asyncpg.Connection, node: str, reported: dict[str, tuple[str, str] | None]
    ) -> list[FencingOrder]:
        """`reconcile_node` inside the caller's transaction."""
        orders: list[FencingOrder] = []
        rows = await connection.fetch(Q["placements_of_node"], node, SETTLED_SECONDS)
        holders: dict[str, list[asyncpg.Record]] = {}
        for row in rows:
            holders.setdefault(row["worker"], []).append(row)
        for worker, running in reported.items():
            held = holders.get(worker, [])
            if running is not None and not any(_held_by(r["holder"], *running) for r in held):
                orders.append(FencingOrder(worker=worker, atespace=running[0], name=running[1]))
            for row in held:
                if row["state"] != ActorState.RUNNING or not row["settled"]:
                    continue
                if running is None or not _held_by(row["holder"], *running):
                    await connection.execute(
                        Q["crash_actor_on_worker"],
                        row["atespace"],
                        row["name"],
                        row["worker_id"],
                        f"sandbox not found on worker {worker} ({node}): the node lost it (restart or crash)",
                    )
                    await connection.execute(Q["delete_placement"], row["holder"])
        for order in orders:
            worker_id = await connection.fetchval(Q["worker_by_name"], node, order.worker)
            if worker_id is not None:
                await connection.execute(
                    Q["fence_worker"], worker_id, f"fenced: stopping {order.atespace}/{order.name}"
                )
        if await connection.fetchval(Q["node_draining"], node):
            await connection.execute(Q["set_node_workers_state"], node, "UNAVAILABLE", "draining")
        return orders

    async def mark_lost_nodes(self) -> list[str]:
        """Nodes silent for NODE_LIVENESS_SECONDS: workers UNAVAILABLE, RUNNING actors CRASHED.

        Returns:
            The nodes marked lost now.
        """
        lost: list[str] = []
        async with self.pool.acquire() as connection, connection.transaction():
            for node in await connection.fetch(Q["lost_nodes"], NODE_LIVENESS_SECONDS):
                name = node["name"]
                await connection.execute(Q["set_node_workers_state"], name, "UNAVAILABLE", "node lost")
                for actor in await connection.fetch(Q["actors_on_node"], name):
                    if actor["state"] == ActorState.RUNNING:
                        await connection.execute(
                            Q["crash_actor_on_worker"],
                            actor["atespace"],
                            actor["name"],
                            actor["worker_id"],
                            f"worker lost: node {name} sent no heartbeat since "
                            f"{node['last_heartbeat']:%Y-%m-%d %H:%M:%S} UTC",
                        )
                        await connection.execute(Q["delete_placement"], f"actor/{actor['atespace']}/{actor['name']}")
                lost.append(name)
        return lost

    async def begin_drain(self, node: str, deadline: datetime) -> DrainPlan:
        """Mark a node draining (its workers take no new actors); list the actors on it.

        Raises:
            NotFound: unknown node.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["mark_node_draining"], node, deadline) is None:
                raise NotFound(f"node {node} not found")
            await connection.execute(Q["set_node_workers_state"], node, "UNAVAILABLE", "draining")
            plan = DrainPlan()
            # Bound to the node's workers, or PAUSED with the local snapshot on its disk (a suspend
            # uploads it): both must be suspended before the node goes.
            actors = [*await connection.fetch(Q["actors_on_node"], node),
                      *await connection.fetch(Q["actors_pinned_to_node"], node)]  # fmt: skip
            for actor in actors:
                ref = ActorRef(actor["atespace"], actor["name"])
                if actor["state"] in (ActorState.RUNNING, ActorState.PAUSED):
                    if ref not in plan.running:
                        plan.running.append(ref)
                else:
                    plan.other.append((ref, actor["state"]))
            return plan

    async def drain_leftovers(self, node: str) -> list[tuple[ActorRef, WorkerRef | None]]:
        """Actors still on a drained node (not SUSPENDED by the deadline): bound to its workers
        (with the worker), or PAUSED with their local snapshot there (worker None)."""
        async with self.pool.acquire() as connection:
            rows = await connection.fetch(Q["actors_on_node"], node)
            left: list[tuple[ActorRef, WorkerRef | None]] = [
                (ActorRef(r["atespace"], r["name"]), await self._worker_ref(connection, r["worker_id"])) for r in rows
            ]
            for r in await connection.fetch(Q["actors_pinned_to_node"], node):
                ref = ActorRef(r["atespace"], r["name"])
                if all(ref != other for other, _ in left):
                    left.append((ref, None))
            return left

    async def crash_after_deadline(
        self, ref: ActorRef, worker_id: int | None, reason: str, node: str | None = None
    ) -> None:
        """Eviction deadline passed: the actor becomes CRASHED whatever its state, place freed.

        `worker_id` None: a PAUSED actor whose local snapshot on `node` was not uploaded in time
        (the snapshot is released). Its last COMPLETED snapshot stays its latest, so a revert
        brings it back.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if worker_id is None:
                await connection.execute(Q["crash_paused_actor_after_deadline"], ref.atespace, ref.name, node, reason)
                return
            await connection.execute(Q["crash_actor_after_deadline"], ref.atespace, ref.name, worker_id, reason)
            if actor is not None and actor["in_progress_snapshot_id"] is not None:  # a suspend that lost the race
                await connection.execute(Q["delete_pending_snapshot"], actor["in_progress_snapshot_id"])
            await connection.execute(Q["delete_placement"], ref.workflow_id)

    async def end_drain(self, node: str) -> None:
        """Clear a node's drain: its workers take actors again at the next heartbeat."""
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["mark_node_draining"], node, None) is None:
                raise NotFound(f"node {node} not found")
            await connection.execute(Q["set_node_workers_state"], node, "ACTIVE", None)

    # ---- operation history ------------------------------------------------------------------

    async def finish_operation(self, operation_id: str, outcome: str, error: str | None, worker: str | None) -> None:
        """Record an operation's outcome (no-op when already recorded)."""
        await self.pool.execute(Q["finish_operation"], operation_id, outcome, error, worker)

    async def actor_operations(self, ref: ActorRef, limit: int = 10) -> list[OperationRecord]:
        """The last `limit` operations of an actor, newest first."""
        rows = await self.pool.fetch(Q["actor_operations"], ref.atespace, ref.name, limit)
        return [OperationRecord(**dict(r)) for r in rows]

    # ---- tags -------------------------------------------------------------------------------

    async def create_tag(self, ref: ActorRef, tag: str) -> TagRecord:
        """Tag the actor's latest COMPLETED snapshot as `<atespace>/<tag>`.

        Raises:
            NotFound: unknown actor. FailedPrecondition: no COMPLETED snapshot yet.
            AlreadyExists: the tag exists.
        """
        row = await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name)
        if row is None:
            raise NotFound(f"actor {ref.key} not found")
        if row["snapshot_id"] is None or row["snapshot_state"] != "COMPLETED":
            raise FailedPrecondition(
                f"actor {ref.key} has no completed snapshot to tag yet; suspend it first "
                f"('ate suspend actor {ref.name} -a {ref.atespace}')"
            )
        created = await self.pool.fetchrow(Q["create_tag"], ref.atespace, tag, row["snapshot_id"], ref.name)
        if created is None:
            raise AlreadyExists(f"tag {ref.atespace}/{tag} already exists")
        return await self.get_tag(ref.atespace, tag)

    async def get_tag(self, atespace: str, tag: str) -> TagRecord:
        """One tag. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_tag"], atespace, tag)
        if row is None:
            raise NotFound(f"tag {atespace}/{tag} not found")
        return _tag(row)

    async def list_tags(self, atespace: str) -> list[TagRecord]:
        """The tags of an atespace."""
        return [_tag(r) for r in await self.pool.fetch(Q["list_tags"], atespace)]

    async def use_snapshot_of_tag(self, ref: ActorRef, tag: TagRecord) -> None:
        """Make a just-created actor start from a tag's snapshot (its first resume restores it)."""
        await self.pool.execute(Q["set_actor_snapshot"], ref.atespace, ref.name, tag.snapshot_id)

    # ---- snapshot garbage collection --------------------------------------------------------

    async def garbage_snapshots(self, limit: int, min_age_seconds: float) -> list[GarbageSnapshot]:
        """Snapshots nothing needs (owner gone, or superseded), oldest first."""
        rows = await self.pool.fetch(Q["garbage_snapshots"], limit, min_age_seconds)
        return [
            GarbageSnapshot(
                snapshot_id=r["id"],
                uri=r["uri"],
                owner=r["owner"],
                generation=r["generation"],
                storage=SnapshotStorage(r["storage"]),
                node=r["node"],
            )
            for r in rows
        ]

    async def forget_snapshot(self, snapshot_id: int) -> None:
        """Delete a snapshot row once its data is gone (idempotent)."""
        try:
            await self.pool.execute(Q["delete_snapshot_row"], snapshot_id)
        except asyncpg.ForeignKeyViolationError as error:  # referenced again meanwhile: keep it
            raise VersionConflict(f"snapshot {snapshot_id} is referenced again; not deleted") from error

    async def any_live_atelet(self) -> str | None:
        """Address of an atelet with a recent heartbeat."""
        address: str | None = await self.pool.fetchval(Q["any_live_atelet"], NODE_LIVENESS_SECONDS)
        return address

    async def live_atelet_of(self, node: str) -> str | None:
        """Address of the node's atelet when it sent a heartbeat recently, else None."""
        row = await self.pool.fetchrow(Q["node_address"], node, NODE_LIVENESS_SECONDS)
        return str(row["address"]) if row is not None and row["alive"] else None


def _tag(row: asyncpg.Record) -> TagRecord:
    values: dict[str, Any] = dict(row)
    values.pop("uri", None)
    return TagRecord(**values)
