"""Nodes and their workers: registration and heartbeats, reconciliation of what an atelet runs
against the placements (a returning node gets its UNREACHABLE actors back), sandbox exits,
retired nodes, fencing, and finding a live atelet. Marking nodes lost is `store.liveness`."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.quantities import check_worker_places
from domain.refs import ActorRef
from domain.states import ON_WORKER, ActorState
from domain.temporal import template_workflow_id
from store.crashes import crash_on_worker, hold_for_drain, hold_router_draining_workers
from store.errors import InvalidArgument, NodeRetired, NotFound
from store.records import WorkerRecord, WorkerRegistration
from store.sql import QUERIES as Q

SETTLED_SECONDS = 10.0
"""A RUNNING actor its atelet reports absent is crashed only if it has been RUNNING this long,
so a heartbeat taken just before a restore finished cannot crash a fresh actor."""


@dataclass(frozen=True)
class NodeStatus:
    """A node's atelet address, whether the node is alive (neither lost nor retired), and the
    seconds since its last heartbeat."""

    address: str
    alive: bool
    silent_seconds: float


@dataclass
class FencingOrder:
    """A sandbox an atelet must stop: the control plane places nothing of it on that worker."""

    worker: str
    atespace: str
    name: str


def _held_by(holder: str, atespace: str, name: str) -> bool:
    """Whether a placement holder is the sandbox an atelet reports as (atespace, name)."""
    if holder == ActorRef(atespace, name).workflow_id:
        return True
    return name.startswith("golden-") and holder == template_workflow_id(atespace, name.removeprefix("golden-"))


def check_registrations(node: str, workers: list[WorkerRegistration]) -> None:
    """Refuse a registration a worker could not honour (before anything is written).

    Raises:
        InvalidArgument: a worker claims places other than 1 (a worker is one sandbox with one
            address); the message names the worker and the field.
    """
    for w in workers:
        try:
            check_worker_places(w.places)
        except ValueError as error:
            raise InvalidArgument(f"worker {w.name} of node {node}: places {error}", {"field": "places"}) from None


class Nodes:
    """The nodes and workers tables, as the atelets report them."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def register(
        self,
        node: str,
        address: str,
        runsc_version: str,
        workers: list[WorkerRegistration],
        running: dict[str, tuple[str, str] | None] | None = None,
        exited: frozenset[str] = frozenset(),
    ) -> list[FencingOrder]:
        """Upsert an atelet and its workers (ACTIVE, a lost node alive again); workers it no
        longer reports become UNAVAILABLE.

        Args:
            running: worker name -> (atespace, name) of its sandbox, or None when idle; when
                given, the node is reconciled against the placements (see `reconcile`).
            exited: the workers whose sandbox in `running` has exited (see `reconcile`).

        Returns:
            The sandboxes the atelet must stop (fencing).

        Raises:
            NodeRetired: the node was retired (its worker pod deleted); it never comes back.
            InvalidArgument: a worker claims places other than 1; nothing is written.
        """
        check_registrations(node, workers)
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["node_retired"], node) is not None:
                raise NodeRetired(
                    f"node {node} was retired (its worker pod was deleted) and cannot register again; "
                    "a new pod registers under its own name"
                )
            await connection.execute(Q["upsert_node"], node, address, runsc_version)
            for w in workers:
                await connection.execute(
                    Q["upsert_worker"],
                    node,
                    w.name,
                    w.pool,
                    w.ip,
                    w.sandbox_class,
                    w.labels,
                    w.places,
                    w.cpu_millis,
                    w.memory_bytes,
                    w.runtime_version,
                )
            await connection.execute(Q["retire_missing_workers"], node, [w.name for w in workers])
            orders = [] if running is None else await self._reconcile(connection, node, running, exited)
            await connection.execute(Q["hold_unready_pod_workers"], node)
            await hold_router_draining_workers(connection, node)
            return orders

    async def sync_pod(self, node: str, address: str, worker: WorkerRegistration, ready: bool) -> bool:
        """The pod syncer's report of a worker pod (one atelet, one worker; the node is the pod):
        the node and its worker exist, UNAVAILABLE while the pod is not Ready. Heartbeats keep
        their own say (a node whose atelet never beats is lost after the lease, domain/liveness.py).

        Returns:
            False when the node was retired (a deleted pod is never brought back): nothing changes.

        Raises:
            InvalidArgument: the worker claims places other than 1; nothing is written.
        """
        check_registrations(node, [worker])
        async with self.pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(Q["node_retired"], node) is not None:
                return False
            await connection.execute(Q["upsert_pod_node"], node, address, not ready)
            exists = await connection.fetchval(Q["worker_by_name"], node, worker.name)
            if exists is None:
                await connection.execute(
                    Q["upsert_worker"],
                    node,
                    worker.name,
                    worker.pool,
                    worker.ip,
                    worker.sandbox_class,
                    worker.labels,
                    worker.places,
                    worker.cpu_millis,
                    worker.memory_bytes,
                    worker.runtime_version,
                )
            if ready:  # Ready again: what the pod held back is lifted (the next heartbeat agrees)
                await connection.execute(Q["lift_unready_pod_workers"], node)
            await connection.execute(Q["hold_unready_pod_workers"], node)
            return True

    async def live_pod_nodes(self) -> list[str]:
        """The nodes of worker pods that are not retired (what the pod syncer believes exists)."""
        return [r["name"] for r in await self.pool.fetch(Q["live_pod_nodes"])]

    async def retire(self, node: str, reason: str) -> list[tuple[ActorRef, str]]:
        """A node is gone for good (its worker pod was deleted): an actor that ran there (RUNNING,
        or UNREACHABLE waiting for it) is CRASHED, its memory gone; each other actor it hosted or
        that is pinned to it goes back to SUSPENDED with its last COMPLETED snapshot (a CRASHED
        one stays CRASHED); their places are freed, the workers forgotten, and the node kept as a
        tombstone that never registers again. Idempotent.

        Args:
            reason: what happened, e.g. `worker pod ate/p1 was deleted`; each actor's last error
                says it with what it means for that actor.

        Returns:
            The actors released, with the state they are in now.
        """
        released_reason = f"{reason}; back to its last completed snapshot"
        crashed_reason = (
            f"{reason} while the actor ran there: what it did since its last completed snapshot is lost; "
            "revert it to that snapshot with 'ate revert actor'"
        )
        async with self.pool.acquire() as connection, connection.transaction():
            locked = await connection.fetch(Q["lock_actors_of_node"], node)
            released = await connection.fetch(Q["release_actors_of_node"], node, released_reason, crashed_reason)
            for row in locked:
                if row["in_progress_snapshot_id"] is not None:
                    await connection.execute(Q["delete_pending_snapshot"], row["in_progress_snapshot_id"])
            await connection.execute(Q["delete_placements_of_node"], node)
            for row in released:
                ref = ActorRef(row["atespace"], row["name"])
                await connection.execute(Q["delete_placement"], ref.workflow_id)
                if row["state"] == ActorState.CRASHED:  # it ran there: the routers drop its address
                    await hold_for_drain(connection, ref, None, row["version"])
            await connection.execute(Q["delete_workers_of_node"], node)
            await connection.execute(Q["retire_node"], node)
            return [(ActorRef(r["atespace"], r["name"]), r["state"]) for r in released]

    async def list_workers(self) -> list[WorkerRecord]:
        """Every worker with its usage."""
        rows = await self.pool.fetch(Q["list_workers"])
        return [WorkerRecord.from_row(r) for r in rows]

    async def fence_worker(self, worker_id: int, reason: str) -> None:
        """Take a worker out of placement: its node could not confirm the sandbox stopped."""
        await self.pool.execute(Q["fence_worker"], worker_id, reason)

    async def crash_actor(self, ref: ActorRef, worker_id: int, reason: str) -> bool:
        """RUNNING or UNREACHABLE on `worker_id` -> CRASHED with the reason, place freed. Returns
        whether it applied."""
        async with self.pool.acquire() as connection, connection.transaction():
            return await crash_on_worker(connection, ref, worker_id, reason)

    async def record_sandbox_exit(self, node: str, worker: str, ref: ActorRef, reason: str) -> bool:
        """An atelet saw a sandbox exit on its own: its RUNNING (or UNREACHABLE) actor becomes CRASHED.

        Returns:
            Whether an actor was marked CRASHED (False when it was not RUNNING there: e.g. an
            exit during a suspend, which the suspend itself handles).

        Raises:
            NotFound: the node has no such worker.
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

    async def reconcile(
        self, node: str, reported: dict[str, tuple[str, str] | None], exited: frozenset[str] = frozenset()
    ) -> list[FencingOrder]:
        """Compare what an atelet runs with the placements on its workers.

        Args:
            node: the node.
            reported: worker name -> (atespace, name) of the sandbox on it, or None when idle.
            exited: the workers whose reported sandbox has exited (it is still there, stopped).

        Returns:
            Sandboxes the atelet must stop (it runs them, nothing is placed there for them);
            those workers stay UNAVAILABLE (fenced) until they report idle. An UNREACHABLE actor
            whose sandbox still runs there is RUNNING again (same sandbox, memory intact); one
            whose sandbox is gone or exited is CRASHED. RUNNING actors whose sandbox the atelet
            no longer has (and that have been RUNNING for a while) become CRASHED. A crashed
            actor's place is freed.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            return await self._reconcile(connection, node, reported, exited)

    async def _reconcile(
        self,
        connection: asyncpg.Connection,
        node: str,
        reported: dict[str, tuple[str, str] | None],
        exited: frozenset[str] = frozenset(),
    ) -> list[FencingOrder]:
        """`reconcile` inside the caller's transaction."""
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
                if row["state"] == ActorState.UNREACHABLE:
                    order = await self._returned(connection, node, worker, row, running, worker in exited)
                    if order is not None:
                        orders.append(order)
                    continue
                if row["state"] not in ON_WORKER or not row["settled"]:
                    continue
                if running is None or not _held_by(row["holder"], *running):
                    await crash_on_worker(
                        connection,
                        ActorRef(row["atespace"], row["name"]),
                        row["worker_id"],
                        f"sandbox not found on worker {worker} ({node}): the node lost it (restart or crash)",
                        row["holder"],
                    )
        for order in orders:
            worker_id = await connection.fetchval(Q["worker_by_name"], node, order.worker)
            if worker_id is not None:
                await connection.execute(
                    Q["fence_worker"], worker_id, f"fenced: stopping {order.atespace}/{order.name}"
                )
        if await connection.fetchval(Q["node_draining"], node):
            await connection.execute(Q["set_node_workers_state"], node, "UNAVAILABLE", "draining")
        return orders

    async def _returned(
        self,
        connection: asyncpg.Connection,
        node: str,
        worker: str,
        row: asyncpg.Record,
        running: tuple[str, str] | None,
        exited: bool,
    ) -> FencingOrder | None:
        """An UNREACHABLE actor's node answers again: RUNNING when the atelet still runs its
        sandbox on that worker, else CRASHED (its place freed, and an exited sandbox of it
        fenced, since nothing is placed there for it any more)."""
        ref = ActorRef(row["atespace"], row["name"])
        there = running is not None and _held_by(row["holder"], *running)
        if there and not exited:
            await connection.execute(Q["mark_actor_reachable"], ref.atespace, ref.name, row["worker_id"])
            return None
        what = "its sandbox exited meanwhile" if there else "it no longer has the actor's sandbox (restart or crash)"
        await crash_on_worker(
            connection,
            ref,
            row["worker_id"],
            f"node {node} answered again but {what} on worker {worker}; bring the actor back to its last "
            f"completed snapshot with 'ate revert actor {ref.name} -a {ref.atespace}'",
            row["holder"],
        )
        return FencingOrder(worker=worker, atespace=ref.atespace, name=ref.name) if there else None

    async def alive(self, connection: asyncpg.Connection, node: str) -> bool:
        """Whether the node is alive: neither lost (silent past its lease) nor retired."""
        return bool(await connection.fetchval(Q["node_alive"], node))

    async def status(self, connection: asyncpg.Connection, node: str | None) -> NodeStatus | None:
        """The node's atelet address, liveness and silence; None for an unknown node."""
        row = await connection.fetchrow(Q["node_address"], node)
        if row is None:
            return None
        return NodeStatus(address=str(row["address"]), alive=bool(row["alive"]), silent_seconds=row["silent_seconds"])

    async def atelet_address(self, connection: asyncpg.Connection, node: str | None) -> str | None:
        """The address of the node's atelet when the node is alive, else None."""
        status = await self.status(connection, node)
        return status.address if status is not None and status.alive else None

    async def exists(self, node: str) -> bool:
        """Whether the node is registered (alive, lost or retired)."""
        async with self.pool.acquire() as connection:
            return await self.status(connection, node) is not None

    async def live_atelet_of(self, node: str) -> str | None:
        """`atelet_address` outside a transaction."""
        async with self.pool.acquire() as connection:
            return await self.atelet_address(connection, node)

    async def any_live_atelet(self) -> tuple[str, str] | None:
        """(node name, atelet address) of a live atelet, the most recently heard first, or None."""
        row = await self.pool.fetchrow(Q["any_live_atelet"])
        return None if row is None else (str(row["name"]), str(row["address"]))
