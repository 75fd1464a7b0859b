"""Placement: the six checks, the less loaded of two candidates, the bind in one transaction
(ARCHITECTURE.md, "Placement"), and the "no room" message naming the check that removed the last
candidates. Mixed into `Store`; runs inside the caller's transaction.
"""

from typing import Any

import asyncpg

from activities.store.errors import (
    NoCapacity,
    NoMatchingWorker,
    NotFound,
)
from activities.store.snapshot_names import LOCAL_LOCATION, snapshot_uri
from activities.store.sql import QUERIES as Q
from domain.quantities import parse_cpu_millis, parse_memory_bytes
from domain.refs import SnapshotRef, WorkerRef
from domain.states import SnapshotScope, SnapshotStorage

NODE_LIVENESS_SECONDS = 15.0
"""A node whose last heartbeat is older than this is lost (atelets beat every 5 s)."""

PLACEMENT_ATTEMPTS = 5
"""Binding attempts before giving up when other resumes keep taking the chosen workers."""


def limits_of(spec: dict[str, Any]) -> tuple[int, int]:
    """(millicores, bytes) a template's resources.limits reserve on a worker (0 when unset)."""
    limits = (spec.get("resources") or {}).get("limits") or {}
    cpu = parse_cpu_millis(limits["cpu"]) if limits.get("cpu") is not None else 0
    memory = parse_memory_bytes(limits["memory"]) if limits.get("memory") is not None else 0
    return cpu, memory


class PlacementMixin:
    """Worker choice and binding; references to workers and snapshots."""

    pool: asyncpg.Pool

    # ---- placement -------------------------------------------------------------------------

    async def _worker_ref(self, connection: asyncpg.Connection, worker_id: int) -> WorkerRef:
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

    async def _snapshot_ref(self, connection: asyncpg.Connection, snapshot_id: int) -> SnapshotRef:
        row = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
        if row is None:
            raise NotFound(f"snapshot {snapshot_id} not found")
        return SnapshotRef(
            snapshot_id=row["id"],
            generation=row["generation"],
            scope=SnapshotScope(row["scope"]),
            uri=row["uri"],
            manifest=row["manifest"],
            storage=SnapshotStorage(row["storage"]),
            node=row["node"],
        )

    async def _reserve_snapshot(
        self,
        connection: asyncpg.Connection,
        *,
        owner: str,
        operation_id: str,
        spec: dict[str, Any],
        scope: SnapshotScope,
        local_node: str | None = None,
    ) -> SnapshotRef:
        """Record the owner's next generation as a PENDING snapshot, inside the caller's transaction.

        EXTERNAL in the template's storage location, or LOCAL on `local_node` when given. The
        generation is max+1 of the owner's (the caller holds the owner's row lock; UNIQUE
        (owner, generation) backs it).
        """
        generation = await connection.fetchval(Q["next_generation"], owner)
        location = (
            LOCAL_LOCATION if local_node else str((spec.get("snapshotConfig") or {}).get("storageLocation") or "")
        )
        storage = SnapshotStorage.LOCAL if local_node else SnapshotStorage.EXTERNAL
        uri = snapshot_uri(location, owner, generation, operation_id)
        snapshot_id = await connection.fetchval(
            Q["insert_snapshot"],
            owner,
            generation,
            scope.value,
            uri,
            str(spec.get("sandboxClass") or "gvisor"),
            operation_id,
            local_node,
            storage.value,
        )
        return SnapshotRef(
            snapshot_id=snapshot_id, generation=generation, scope=scope, uri=uri, storage=storage, node=local_node
        )

    async def _place(
        self,
        connection: asyncpg.Connection,
        *,
        holder: str,
        operation_id: str,
        label: str,
        spec: dict[str, Any],
        actor_selector: dict[str, str],
        node: str | None = None,
    ) -> int:
        """Choose a worker and bind `holder` to it inside the caller's transaction.

        `node`: the node holding the actor's LOCAL snapshot, when one pins it (check 3).
        Six checks (ACTIVE, class, pinned node, labels x2, places, cpu, memory) filter the workers; of two
        random candidates the less loaded wins (power of two choices, ARCHITECTURE.md
        "Placement"); the chosen worker row is locked and its room checked again before binding.

        Returns:
            The bound worker's id.

        Raises:
            NoCapacity: no worker passes; the message names the check that removed the last.
        """
        sandbox_class = str(spec.get("sandboxClass") or "gvisor")
        template_selector = spec.get("workerSelector") or {}
        cpu, memory = limits_of(spec)
        excluded: list[int] = []
        for _ in range(PLACEMENT_ATTEMPTS):
            candidates = await connection.fetch(
                Q["placement_candidates"],
                sandbox_class,
                template_selector,
                actor_selector,
                cpu,
                memory,
                excluded,
                2,
                node,
            )
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
        message, permanent = await self._no_room_message(
            connection, label, sandbox_class, template_selector, actor_selector, cpu, memory, node
        )
        raise (NoMatchingWorker if permanent else NoCapacity)(message)

    async def _no_room_message(
        self,
        connection: asyncpg.Connection,
        label: str,
        sandbox_class: str,
        template_selector: dict[str, str],
        actor_selector: dict[str, str],
        cpu: int,
        memory: int,
        node: str | None = None,
    ) -> tuple[str, bool]:
        """The "no room" message naming the check that removed the last candidates, and whether
        the cause is configuration (class, labels) rather than a momentary shortage."""
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

    async def placement_held(self, holder: str, worker_id: int, operation_id: str) -> bool:
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
