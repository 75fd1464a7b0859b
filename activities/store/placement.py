"""Placement: the checks, the less loaded of two candidates, the bind in one transaction
(ARCHITECTURE.md, "Placement"), and the "no room" message naming the check that removed the last
candidates. Its methods run inside the caller's transaction (the caller holds the actor's or
template's row lock).
"""

from __future__ import annotations

import asyncpg

from activities.store.errors import NoCapacity, NoMatchingWorker, NotFound
from activities.store.sql import QUERIES as Q
from domain.refs import WorkerRef
from domain.templates import ActorTemplateSpec

PLACEMENT_ATTEMPTS = 5
"""Binding attempts before giving up when other resumes keep taking the chosen workers."""


class Placement:
    """Chooses and binds workers; `pool` serves the reads made outside a transaction."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

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
        self,
        connection: asyncpg.Connection,
        *,
        holder: str,
        operation_id: str,
        label: str,
        spec: ActorTemplateSpec,
        actor_selector: dict[str, str],
        node: str | None = None,
    ) -> int:
        """Choose a worker and bind `holder` to it inside the caller's transaction.

        `node`: the node holding the actor's LOCAL snapshot, when one pins it (check 3).
        The checks (ACTIVE, class, pinned node, labels x2, places, cpu, memory) filter the
        workers; of two random candidates the less loaded wins (power of two choices,
        ARCHITECTURE.md "Placement"); the chosen worker row is locked and its room checked
        again before binding.

        Returns:
            The bound worker's id.

        Raises:
            NoCapacity: no worker passes; the message names the check that removed the last.
            NoMatchingWorker: the same, when configuration (class, labels) rules every worker out.
        """
        cpu, memory = spec.limits.cpu_millis, spec.limits.memory_bytes
        excluded: list[int] = []
        for _ in range(PLACEMENT_ATTEMPTS):
            candidates = await self.candidates(connection, spec, actor_selector, excluded=excluded, node=node)
            if not candidates:
                break
            chosen = min(candidates, key=lambda r: r["load"])["id"]
            room = await connection.fetchrow(Q["lock_worker"], chosen)
            used = await connection.fetchrow(Q["worker_usage"], chosen)  # after the lock: sees every bind
            if (
                room["state"] == "ACTIVE"
                and used["used_places"] + 1 <= room["places"]
                and used["used_cpu"] + cpu <= room["cpu_millis"]
                and used["used_memory"] + memory <= room["memory_bytes"]
            ):
                await connection.execute(Q["insert_placement"], holder, chosen, operation_id, cpu, memory)
                return int(chosen)
            excluded.append(chosen)
        message, permanent = await self.no_room_message(connection, label, spec, actor_selector, node)
        raise (NoMatchingWorker if permanent else NoCapacity)(message)

    async def candidates(
        self,
        connection: asyncpg.Connection,
        spec: ActorTemplateSpec,
        actor_selector: dict[str, str],
        *,
        excluded: list[int] | None = None,
        node: str | None = None,
        sample: int = 2,
    ) -> list[asyncpg.Record]:
        """Up to `sample` random workers passing every check (rows with `id` and `load`)."""
        return list(
            await connection.fetch(
                Q["placement_candidates"],
                spec.sandbox_class,
                spec.worker_selector,
                actor_selector,
                spec.limits.cpu_millis,
                spec.limits.memory_bytes,
                excluded or [],
                sample,
                node,
            )
        )

    async def no_room_message(
        self,
        connection: asyncpg.Connection,
        label: str,
        spec: ActorTemplateSpec,
        actor_selector: dict[str, str],
        node: str | None = None,
    ) -> tuple[str, bool]:
        """The "no room" message naming the check that removed the last candidates, and whether
        the cause is configuration (class, labels) rather than a momentary shortage."""
        sandbox_class, template_selector = spec.sandbox_class, spec.worker_selector
        cpu, memory = spec.limits.cpu_millis, spec.limits.memory_bytes
        d = await connection.fetchrow(
            Q["placement_diagnosis"], sandbox_class, template_selector, actor_selector, cpu, node
        )
        head = f"no worker has room for {label}"
        permanent = False
        if d["total"] == 0:
            why = "no worker is registered (is an atelet running?)"
        elif d["active"] == 0:
            why = f"none of the {d['total']} workers is ACTIVE"
        elif d["class_ok"] == 0:
            why = f"no ACTIVE worker has sandbox class {sandbox_class}; add a worker pool of that class"
            permanent = True
        elif d["node_ok"] == 0:
            why = f"no ACTIVE {sandbox_class} worker is on node {node}, which holds the actor's paused (local) snapshot"
        elif d["labels_ok"] == 0:
            selectors = {**template_selector, **actor_selector}
            why = (
                f"no ACTIVE {sandbox_class} worker has the labels {selectors} the template and actor select; "
                "change the actor's worker_selector or label a worker pool"
            )
            permanent = True
        elif d["places_ok"] == 0:
            where = f" on node {node} (the actor is pinned there by its paused snapshot)" if node else ""
            why = f"all {d['labels_ok']} matching workers{where} have every place taken"
        elif d["cpu_ok"] == 0:
            why = f"no matching worker with a free place has {cpu}m of CPU free"
        else:
            why = f"no matching worker with a free place and CPU has {memory} bytes of memory free"
        return f"{head}: {why}", permanent

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
