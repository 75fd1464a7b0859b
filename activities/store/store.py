"""`Store`: the only user of asyncpg. Named queries in, dataclasses and store errors out.

Every state transition of an actor happens here, in one transaction that locks the actor row,
checks the state-machine edge, and writes the intent before the caller's side effect. Each
transition is idempotent for its operation ID, so a Temporal activity retried after any crash
finds its own earlier write and returns the same answer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import asyncpg

from activities.store.errors import (
    AlreadyExists,
    FailedPrecondition,
    NoCapacity,
    NoMatchingWorker,
    NotFound,
    VersionConflict,
)
from activities.store.lifecycle import FencingOrder, LifecycleMixin
from activities.store.records import (
    ActorRecord,
    AtespaceRecord,
    TemplateRecord,
    WorkerRecord,
    WorkerRegistration,
)
from activities.store.sql import QUERIES as Q
from workflows.quantities import parse_cpu_millis, parse_memory_bytes
from workflows.types import (
    ActorRef,
    ActorState,
    GoldenPlan,
    ResumePlan,
    SnapshotRef,
    SnapshotScope,
    SuspendPlan,
    WorkerRef,
    template_workflow_id,
)

PLACEMENT_ATTEMPTS = 5
"""Binding attempts before giving up when other resumes keep taking the chosen workers."""


async def _init_connection(connection: asyncpg.Connection) -> None:
    await connection.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


def limits_of(spec: dict[str, Any]) -> tuple[int, int]:
    """(millicores, bytes) a template's resources.limits reserve on a worker (0 when unset)."""
    limits = (spec.get("resources") or {}).get("limits") or {}
    cpu = parse_cpu_millis(limits["cpu"]) if limits.get("cpu") is not None else 0
    memory = parse_memory_bytes(limits["memory"]) if limits.get("memory") is not None else 0
    return cpu, memory


def commit_scope_of(spec: dict[str, Any]) -> SnapshotScope:
    """The snapshot scope a suspend writes: the template's snapshotConfig.onCommit (default FULL)."""
    value = str((spec.get("snapshotConfig") or {}).get("onCommit") or "Full")
    return SnapshotScope(value.upper())


def snapshot_uri(location: str, owner: str, generation: int, operation_id: str) -> str:
    """Where a snapshot is stored: `<location>/<owner kind>/<atespace>/<name>/<gen>-<op8>`.

    The operation suffix (a digest of the operation ID) makes each attempt's destination
    unique, so a crashed earlier attempt can never be mistaken for this one's data.
    """
    kind, atespace, name = owner.split("/", 2)
    # Run IDs are UUIDv7: their first characters are a timestamp shared by runs started close
    # together, so the suffix is a digest of the whole ID.
    suffix = hashlib.sha256(operation_id.encode()).hexdigest()[:12]
    return f"{location.rstrip('/')}/{atespace}/{kind}s/{name}/{generation}-{suffix}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class Store(LifecycleMixin):
    """Postgres access for the API and the activities.

    Args:
        pool: an asyncpg pool whose connections decode jsonb (see `Store.connect`).
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 2, max_size: int = 10) -> Store:
        """Open a pool to `dsn` (a postgres:// URL).

        Raises:
            OSError, asyncpg.PostgresError: the database cannot be reached.
        """
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init_connection)
        assert pool is not None
        return cls(pool)

    async def close(self) -> None:
        """Close every connection."""
        await self.pool.close()

    # ---- atespaces -------------------------------------------------------------------------

    async def create_atespace(self, name: str) -> AtespaceRecord:
        """Create an atespace. Raises AlreadyExists."""
        row = await self.pool.fetchrow(Q["create_atespace"], name)
        if row is None:
            raise AlreadyExists(f"atespace {name} already exists")
        return AtespaceRecord(name=row["name"], created_at=row["created_at"])

    async def get_atespace(self, name: str) -> AtespaceRecord:
        """One atespace. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_atespace"], name)
        if row is None:
            raise NotFound(f"atespace {name} not found")
        return AtespaceRecord(name=row["name"], created_at=row["created_at"])

    async def list_atespaces(self) -> list[AtespaceRecord]:
        """Every atespace, by name."""
        rows = await self.pool.fetch(Q["list_atespaces"])
        return [AtespaceRecord(name=r["name"], created_at=r["created_at"]) for r in rows]

    async def delete_atespace(self, name: str) -> None:
        """Delete an empty atespace. Raises NotFound, FailedPrecondition (actors or templates remain)."""
        await self.get_atespace(name)
        row = await self.pool.fetchrow(Q["delete_atespace"], name)
        if row is None:
            usage = await self.pool.fetchrow(Q["atespace_usage"], name)
            raise FailedPrecondition(
                f"atespace {name} is not empty: it still holds {_count(usage['actors'], 'actor')} and "
                f"{_count(usage['templates'], 'template')}; delete them first"
            )

    # ---- templates -------------------------------------------------------------------------

    async def create_template(self, atespace: str, name: str, spec: dict[str, Any]) -> TemplateRecord:
        """Create a template in phase Pending. Raises NotFound (atespace), AlreadyExists."""
        await self.get_atespace(atespace)
        row = await self.pool.fetchrow(Q["create_template"], atespace, name, spec)
        if row is None:
            raise AlreadyExists(f"actor template {atespace}/{name} already exists (templates are immutable)")
        return TemplateRecord.from_row(row)

    async def get_template(self, atespace: str, name: str) -> TemplateRecord:
        """One template. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_template"], atespace, name)
        if row is None:
            raise NotFound(f"actor template {atespace}/{name} not found")
        return TemplateRecord.from_row(row)

    async def list_templates(self, atespace: str) -> list[TemplateRecord]:
        """The templates of an atespace. Raises NotFound (atespace)."""
        await self.get_atespace(atespace)
        rows = await self.pool.fetch(Q["list_templates"], atespace)
        return [TemplateRecord.from_row(r) for r in rows]

    async def set_template_phase(
        self, atespace: str, name: str, phase: str, reason: str | None, golden_snapshot_id: int | None
    ) -> None:
        """Record a GoldenSnapshot outcome (idempotent)."""
        await self.pool.execute(Q["set_template_phase"], atespace, name, phase, reason, golden_snapshot_id)

    async def delete_template(self, atespace: str, name: str) -> None:
        """Delete a template. Raises NotFound, FailedPrecondition (actors use it)."""
        await self.get_template(atespace, name)
        row = await self.pool.fetchrow(Q["delete_template"], atespace, name)
        if row is None:
            raise FailedPrecondition(f"actor template {atespace}/{name} is used by actors; delete them first")

    # ---- actors ----------------------------------------------------------------------------

    async def create_actor(self, ref: ActorRef, template: str, worker_selector: dict[str, str]) -> ActorRecord:
        """Create an actor in SUSPENDED. Raises NotFound (atespace, template), AlreadyExists."""
        await self.get_template(ref.atespace, template)
        row = await self.pool.fetchrow(Q["create_actor"], ref.atespace, ref.name, template, worker_selector)
        if row is None:
            raise AlreadyExists(f"actor {ref.key} already exists")
        return await self.get_actor(ref)

    async def get_actor(self, ref: ActorRef) -> ActorRecord:
        """One actor (primary-key lookup). Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name)
        if row is None:
            raise NotFound(f"actor {ref.key} not found")
        return ActorRecord.from_row(row)

    async def list_actors(
        self, atespace: str | None, after: tuple[str, str] | None, limit: int, state: str | None = None
    ) -> tuple[list[ActorRecord], tuple[str, str] | None]:
        """One page of actors in key order.

        Args:
            atespace: only this atespace, or None for all.
            after: the (atespace, name) key of the last actor of the previous page.
            limit: page size (1..1000).
            state: only actors in this state (RUNNING...), or None for all (index actors_state_idx).

        Returns:
            (actors, key to pass as `after` for the next page, or None at the end).
        """
        start = after or ("", "")
        rows = await self.pool.fetch(Q["list_actors"], atespace, start[0], start[1], limit + 1, state)
        actors = [ActorRecord.from_row(r) for r in rows[:limit]]
        next_key = (actors[-1].atespace, actors[-1].name) if len(rows) > limit else None
        return actors, next_key

    async def update_actor_selector(self, ref: ActorRef, worker_selector: dict[str, str]) -> ActorRecord:
        """Replace the actor's worker_selector. Raises NotFound."""
        row = await self.pool.fetchrow(Q["update_actor_selector"], ref.atespace, ref.name, worker_selector)
        if row is None:
            raise NotFound(f"actor {ref.key} not found")
        return await self.get_actor(ref)

    async def delete_actor(self, ref: ActorRef) -> None:
        """Delete a SUSPENDED actor. Raises NotFound, FailedPrecondition (other states)."""
        actor = await self.get_actor(ref)
        row = await self.pool.fetchrow(Q["delete_actor"], ref.atespace, ref.name)
        if row is None:
            raise FailedPrecondition(
                f"actor {ref.key} is not suspended (state: {actor.state}); suspend it first",
                {"state": actor.state},
            )

    # ---- nodes and workers -----------------------------------------------------------------

    async def register_node(
        self,
        node: str,
        address: str,
        runsc_version: str,
        workers: list[WorkerRegistration],
        running: dict[str, tuple[str, str] | None] | None = None,
    ) -> list[FencingOrder]:
        """Upsert an atelet and its workers (ACTIVE); workers it no longer reports become UNAVAILABLE.

        Args:
            running: worker name -> (atespace, name) of its sandbox, or None when idle; when
                given, the node is reconciled against the placements (see `reconcile_node`).

        Returns:
            The sandboxes the atelet must stop (fencing).
        """
        async with self.pool.acquire() as connection, connection.transaction():
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
                )
            await connection.execute(Q["retire_missing_workers"], node, [w.name for w in workers])
            if running is None:
                return []
            return await self._reconcile(connection, node, running)

    async def list_workers(self) -> list[WorkerRecord]:
        """Every worker with its usage."""
        rows = await self.pool.fetch(Q["list_workers"])
        return [WorkerRecord.from_row(r) for r in rows]

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
    ) -> int:
        """Choose a worker and bind `holder` to it inside the caller's transaction.

        Six checks (ACTIVE, class, labels x2, places, cpu, memory) filter the workers; of two
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
            )
            if not candidates:
                break
            chosen = min(candidates, key=lambda r: r["load"])["id"]
            room = await connection.fetchrow(Q["lock_worker_room"], chosen)
            if (
                room["state"] == "ACTIVE"
                and room["used_places"] + 1 <= room["places"]
                and room["used_cpu"] + cpu <= room["cpu_millis"]
                and room["used_memory"] + memory <= room["memory_bytes"]
            ):
                await connection.execute(Q["insert_placement"], holder, chosen, operation_id, cpu, memory)
                return int(chosen)
            excluded.append(chosen)
        message, permanent = await self._no_room_message(
            connection, label, sandbox_class, template_selector, actor_selector, cpu, memory
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
    ) -> tuple[str, bool]:
        """The "no room" message naming the check that removed the last candidates, and whether
        the cause is configuration (class, labels) rather than a momentary shortage."""
        d = await connection.fetchrow(Q["placement_diagnosis"], sandbox_class, template_selector, actor_selector, cpu)
        head = f"no worker has room for {label}"
        permanent = False
        if d["total"] == 0:
            why = "no worker is registered (is an atelet running?)"
        elif d["active"] == 0:
            why = f"none of the {d['total']} workers is ACTIVE"
        elif d["class_ok"] == 0:
            why = f"no ACTIVE worker has sandbox class {sandbox_class}; add a worker pool of that class"
            permanent = True
        elif d["labels_ok"] == 0:
            selectors = {**template_selector, **actor_selector}
            why = (
                f"no ACTIVE {sandbox_class} worker has the labels {selectors} the template and actor select; "
                "change the actor's worker_selector or label a worker pool"
            )
            permanent = True
        elif d["places_ok"] == 0:
            why = f"all {d['labels_ok']} matching workers have every place taken"
        elif d["cpu_ok"] == 0:
            why = f"no matching worker with a free place has {cpu}m of CPU free"
        else:
            why = f"no matching worker with a free place and CPU has {memory} bytes of memory free"
        return f"{head}: {why}", permanent

    # ---- ResumeActor ------------------------------------------------------------------------

    async def begin_resume(self, ref: ActorRef, operation_id: str) -> ResumePlan:
        """SUSPENDED -> RESUMING bound to a worker, in one transaction (idempotent per operation).

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor's state does not allow a resume, or its template has
                no golden snapshot yet.
            NoCapacity: no worker has room.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            spec = actor["spec"]
            if state == ActorState.RUNNING:
                worker = await self._worker_ref(connection, actor["worker_id"])
                return ResumePlan(already_running=True, worker=worker, spec=spec)
            snapshot_id = actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
            if state == ActorState.RESUMING and actor["operation_id"] == operation_id:
                worker = await self._worker_ref(connection, actor["worker_id"])
                snapshot = await self._snapshot_ref(connection, snapshot_id) if snapshot_id else None
                return ResumePlan(already_running=False, worker=worker, snapshot=snapshot, spec=spec)
            if state == ActorState.CRASHED:
                raise FailedPrecondition(
                    f"actor {ref.key} is CRASHED ({actor['last_error'] or 'no reason recorded'}); bring it back "
                    f"to its last completed snapshot with 'ate revert actor {ref.name} -a {ref.atespace}'",
                    {"state": state},
                )
            if state != ActorState.SUSPENDED:
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be resumed from state {state} (ResumeActor wants SUSPENDED)",
                    {"state": state},
                )
            if snapshot_id is None:
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be resumed yet: its template {ref.atespace}/{actor['template']} "
                    f"has no golden snapshot (phase {actor['template_phase']})",
                    {"template_phase": actor["template_phase"]},
                )
            holder = ref.workflow_id
            stale = await connection.fetchrow(Q["get_placement"], holder)
            if stale is not None:  # left by an operation that died before rolling back
                await connection.execute(Q["delete_placement"], holder)
            worker_id = await self._place(
                connection,
                holder=holder,
                operation_id=operation_id,
                label=f"the actor {ref.key}",
                spec=spec,
                actor_selector=actor["worker_selector"],
            )
            updated = await connection.fetchval(
                Q["mark_actor_resuming"], ref.atespace, ref.name, actor["version"], worker_id, operation_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            worker = await self._worker_ref(connection, worker_id)
            snapshot = await self._snapshot_ref(connection, snapshot_id)
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                "ResumeActor",
                f"{worker.pool}/{worker.name}",
            )
            return ResumePlan(already_running=False, worker=worker, snapshot=snapshot, spec=spec)

    async def finish_resume(self, ref: ActorRef, operation_id: str) -> None:
        """RESUMING -> RUNNING for this operation (idempotent: a repeat finds RUNNING).

        Raises:
            FailedPrecondition: the actor is no longer held by this operation.
        """
        updated = await self.pool.fetchval(Q["mark_actor_running"], ref.atespace, ref.name, operation_id)
        await self.pool.execute(Q["finish_operation"], operation_id, "ok", None, None)
        if updated is None:
            actor = await self.get_actor(ref)
            if actor.state == ActorState.RUNNING and actor.operation_id == operation_id:
                return
            raise FailedPrecondition(
                f"actor {ref.key} is no longer resuming under operation {operation_id} (state: {actor.state})"
            )

    async def rollback_resume(self, ref: ActorRef, operation_id: str, error: str) -> None:
        """RESUMING -> SUSPENDED after a failed resume; frees the place (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["rollback_actor_resume"], ref.atespace, ref.name, operation_id, error)
            placement = await connection.fetchrow(Q["get_placement"], ref.workflow_id)
            if placement is not None and (updated is not None or placement["operation_id"] == operation_id):
                await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "failed", error, None)

    # ---- SuspendActor -----------------------------------------------------------------------

    async def begin_suspend(self, ref: ActorRef, operation_id: str) -> SuspendPlan:
        """RUNNING -> SUSPENDING with a PENDING snapshot row reserved (idempotent per operation).

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor's state does not allow a suspend.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            if state == ActorState.SUSPENDED:
                return SuspendPlan(already_suspended=True)
            if state == ActorState.SUSPENDING and actor["operation_id"] == operation_id:
                worker = await self._worker_ref(connection, actor["worker_id"])
                snapshot = await self._snapshot_ref(connection, actor["in_progress_snapshot_id"])
                return SuspendPlan(already_suspended=False, worker=worker, snapshot=snapshot)
            if state != ActorState.RUNNING:
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be suspended from state {state} (SuspendActor wants RUNNING)",
                    {"state": state},
                )
            spec = actor["spec"]
            worker = await self._worker_ref(connection, actor["worker_id"])
            owner = ref.workflow_id
            generation = await connection.fetchval(Q["next_generation"], owner)
            scope = commit_scope_of(spec)
            location = str((spec.get("snapshotConfig") or {}).get("storageLocation") or "")
            uri = snapshot_uri(location, owner, generation, operation_id)
            snapshot_id = await connection.fetchval(
                Q["insert_snapshot"],
                owner,
                generation,
                scope.value,
                uri,
                str(spec.get("sandboxClass") or "gvisor"),
                operation_id,
                None,
            )
            updated = await connection.fetchval(
                Q["mark_actor_suspending"], ref.atespace, ref.name, actor["version"], operation_id, snapshot_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                "SuspendActor",
                f"{worker.pool}/{worker.name}",
            )
            snapshot = SnapshotRef(snapshot_id=snapshot_id, generation=generation, scope=scope, uri=uri)
            return SuspendPlan(already_suspended=False, worker=worker, snapshot=snapshot)

    async def complete_suspend(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Snapshot COMPLETED, actor SUSPENDED with it as latest, place freed: one transaction.

        Idempotent: a repeat after success finds the actor SUSPENDED with this snapshot.

        Raises:
            FailedPrecondition: the actor is no longer held by this operation.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            updated = await connection.fetchval(
                Q["mark_actor_suspended"], ref.atespace, ref.name, operation_id, snapshot_id
            )
            if updated is None:
                row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
                if row is not None and row["state"] == ActorState.SUSPENDED and row["snapshot_id"] == snapshot_id:
                    return
                raise FailedPrecondition(f"actor {ref.key} is no longer suspending under operation {operation_id}")
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)

    async def rollback_suspend(self, ref: ActorRef, operation_id: str, snapshot_id: int, error: str) -> None:
        """SUSPENDING -> RUNNING after a failed checkpoint; the PENDING snapshot row is dropped."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchval(Q["rollback_actor_suspend"], ref.atespace, ref.name, operation_id, error)
            await connection.execute(Q["delete_pending_snapshot"], snapshot_id)
            await connection.execute(Q["finish_operation"], operation_id, "failed", error, None)

    # ---- GoldenSnapshot ---------------------------------------------------------------------

    async def begin_golden(self, atespace: str, template: str, operation_id: str) -> GoldenPlan:
        """Bind a worker for a template's golden boot and reserve its snapshot (idempotent).

        Raises:
            NotFound: unknown template.
            NoCapacity: no worker has room.
        """
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(Q["get_template"], atespace, template)
            if row is None:
                raise NotFound(f"actor template {atespace}/{template} not found")
            spec = row["spec"]
            existing = await connection.fetchrow(Q["find_snapshot_of_operation"], owner, operation_id)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if existing is not None and placement is not None and placement["operation_id"] == operation_id:
                worker = await self._worker_ref(connection, placement["worker_id"])
                snapshot = await self._snapshot_ref(connection, existing["id"])
                return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)
            if placement is not None:
                await connection.execute(Q["delete_placement"], owner)
            worker_id = await self._place(
                connection,
                holder=owner,
                operation_id=operation_id,
                label=f"the golden boot of template {atespace}/{template}",
                spec=spec,
                actor_selector={},
            )
            if existing is not None:
                snapshot = await self._snapshot_ref(connection, existing["id"])
            else:
                generation = await connection.fetchval(Q["next_generation"], owner)
                location = str((spec.get("snapshotConfig") or {}).get("storageLocation") or "")
                uri = snapshot_uri(location, owner, generation, operation_id)
                snapshot_id = await connection.fetchval(
                    Q["insert_snapshot"],
                    owner,
                    generation,
                    SnapshotScope.FULL.value,
                    uri,
                    str(spec.get("sandboxClass") or "gvisor"),
                    operation_id,
                    None,
                )
                snapshot = SnapshotRef(
                    snapshot_id=snapshot_id, generation=generation, scope=SnapshotScope.FULL, uri=uri
                )
            worker = await self._worker_ref(connection, worker_id)
            return GoldenPlan(worker=worker, snapshot=snapshot, spec=spec)

    async def complete_golden(
        self, atespace: str, template: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Golden snapshot COMPLETED, template Ready, place freed (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            await connection.execute(Q["set_template_phase"], atespace, template, "Ready", None, snapshot_id)
            await connection.execute(Q["delete_placement"], owner)

    async def fail_golden(self, atespace: str, template: str, operation_id: str, reason: str) -> None:
        """Template Failed with the reason; place and PENDING snapshot row released (idempotent)."""
        owner = template_workflow_id(atespace, template)
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["set_template_phase"], atespace, template, "Failed", reason, None)
            placement = await connection.fetchrow(Q["get_placement"], owner)
            if placement is not None and placement["operation_id"] == operation_id:
                await connection.execute(Q["delete_placement"], owner)
            await connection.execute(Q["delete_pending_snapshots_of_operation"], owner, operation_id)

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

    async def ping(self) -> None:
        """Raise when the database does not answer."""
        await self.pool.fetchval("SELECT 1")


__all__ = ["Store", "commit_scope_of", "limits_of", "snapshot_uri"]
