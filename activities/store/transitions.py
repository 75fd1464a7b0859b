"""The transitions of ResumeActor, SuspendActor and GoldenSnapshot.

Each runs in one transaction that locks the actor row, checks the state-machine edge and writes
the intent before the caller's side effect; each is idempotent for its operation ID, so an
activity retried after any crash finds its own earlier write and returns the same answer.
"""

import hashlib
from typing import Any

from activities.store.errors import (
    FailedPrecondition,
    NotFound,
    VersionConflict,
)
from activities.store.placement import PlacementMixin
from activities.store.sql import QUERIES as Q
from workflows.types import (
    ActorRef,
    ActorState,
    GoldenPlan,
    ResumePlan,
    SnapshotRef,
    SnapshotScope,
    SuspendPlan,
    template_workflow_id,
)


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


class TransitionsMixin(PlacementMixin):
    """Resume, suspend and golden-snapshot transitions (mixed into `Store`)."""

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
            row = await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name)
            if row is None:
                raise NotFound(f"actor {ref.key} not found")
            if row["state"] == ActorState.RUNNING and row["operation_id"] == operation_id:
                return
            raise FailedPrecondition(
                f"actor {ref.key} is no longer resuming under operation {operation_id} (state: {row['state']})"
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
