"""The transitions of ResumeActor and SuspendActor (PauseActor's are in `pause`, GoldenSnapshot's in `golden`).

Each runs in one transaction that locks the actor row, checks the state-machine edge and writes
the intent before the caller's side effect; each is idempotent for its operation ID, so an
activity retried after any crash finds its own earlier write and returns the same answer.
"""

from typing import Any

from activities.store.errors import FailedPrecondition, NoCapacity, NotFound, VersionConflict
from activities.store.pause import PauseMixin
from activities.store.snapshot_names import commit_scope_of
from activities.store.sql import QUERIES as Q
from domain.operations.resume import ResumePlan
from domain.operations.suspend import SuspendPlan
from domain.refs import ActorRef
from domain.states import ActorState, SnapshotStorage


class TransitionsMixin(PauseMixin):
    """Resume and suspend transitions (mixed into `Store`)."""

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
            # A paused actor (or an async-suspended one whose upload has not landed) restores its
            # local snapshot, on the node that holds it.
            local_id = actor["local_snapshot_id"] or actor["pending_upload_snapshot_id"]
            snapshot_id = local_id or actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
            pinned = actor["pinned_node"] if local_id else None
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
            if state not in (ActorState.SUSPENDED, ActorState.PAUSED):
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be resumed from state {state} (ResumeActor wants SUSPENDED or PAUSED)",
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
            try:
                worker_id = await self._place(
                    connection,
                    holder=holder,
                    operation_id=operation_id,
                    label=f"the actor {ref.key}",
                    spec=spec,
                    actor_selector=actor["worker_selector"],
                    node=pinned,
                )
            except NoCapacity as error:
                if pinned is None:
                    raise
                why = await self._pinned_no_room(connection, ref, actor, pinned, error)
                if why is error:  # no room anywhere: the placement's own message says it
                    raise
                raise why from error
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

    async def begin_suspend(self, ref: ActorRef, operation_id: str, mode: str = "sync") -> SuspendPlan:
        """RUNNING|PAUSED -> SUSPENDING with a PENDING snapshot row reserved (idempotent per operation).

        Mode "async" from RUNNING reserves a LOCAL snapshot on the worker's node (uploaded later
        by an UploadSnapshot workflow); from PAUSED the upload is done now either way.

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
                snapshot = await self._snapshot_ref(connection, actor["in_progress_snapshot_id"])
                if actor["local_snapshot_id"] is not None:
                    return await self._upload_plan(connection, ref, actor["local_snapshot_id"], snapshot)
                bound = await self._worker_ref(connection, actor["worker_id"])
                return SuspendPlan(already_suspended=False, worker=bound, snapshot=snapshot)
            if state not in (ActorState.RUNNING, ActorState.PAUSED):
                raise FailedPrecondition(
                    f"actor {ref.key} cannot be suspended from state {state} (SuspendActor wants RUNNING or PAUSED)",
                    {"state": state},
                )
            spec = actor["spec"]
            worker = await self._worker_ref(connection, actor["worker_id"]) if state == ActorState.RUNNING else None
            local = await self._snapshot_ref(connection, actor["local_snapshot_id"]) if worker is None else None
            if local is not None:
                await self._node_atelet(connection, ref, local)  # refuse before marking when the node is gone
            owner = ref.workflow_id
            # An upload keeps the scope the pause wrote; a checkpoint writes the onCommit scope.
            snapshot = await self._reserve_snapshot(
                connection,
                owner=owner,
                operation_id=operation_id,
                spec=spec,
                scope=local.scope if local is not None else commit_scope_of(spec),
                local_node=worker.node if worker is not None and mode == "async" else None,
            )
            updated = await connection.fetchval(
                Q["mark_actor_suspending"], ref.atespace, ref.name, actor["version"], operation_id, snapshot.snapshot_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                "SuspendActor",
                f"{worker.pool}/{worker.name}" if worker else f"upload from {local.node if local else '?'}",
            )
            if local is not None:
                return await self._upload_plan(connection, ref, local.snapshot_id, snapshot)
            return SuspendPlan(already_suspended=False, worker=worker, snapshot=snapshot)

    async def complete_suspend(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """Snapshot COMPLETED, actor SUSPENDED with it as latest, place freed: one transaction.
        For an async suspend (a LOCAL snapshot), the actor is SUSPENDED pinned to the node with the
        snapshot pending upload instead; its latest stays the last uploaded one.

        Idempotent: a repeat after success finds the actor SUSPENDED with this snapshot.

        Raises:
            FailedPrecondition: the actor is no longer held by this operation.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(Q["complete_snapshot"], snapshot_id, manifest, size_bytes)
            snapshot = await connection.fetchrow(Q["get_snapshot"], snapshot_id)
            if snapshot is not None and snapshot["storage"] == SnapshotStorage.LOCAL:
                updated = await connection.fetchval(
                    Q["mark_actor_suspended_locally"],
                    ref.atespace,
                    ref.name,
                    operation_id,
                    snapshot_id,
                    snapshot["node"],
                )
            else:
                updated = await connection.fetchval(
                    Q["mark_actor_suspended"], ref.atespace, ref.name, operation_id, snapshot_id
                )
            if updated is None:
                row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
                if (
                    row is not None
                    and row["state"] == ActorState.SUSPENDED
                    and snapshot_id
                    in (
                        row["snapshot_id"],
                        row["local_snapshot_id"],
                    )
                ):
                    return
                raise FailedPrecondition(f"actor {ref.key} is no longer suspending under operation {operation_id}")
            await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)

    async def rollback_suspend(self, ref: ActorRef, operation_id: str, snapshot_id: int, error: str) -> None:
        """SUSPENDING|PAUSING -> RUNNING after a failed checkpoint, or SUSPENDING -> PAUSED after a
        failed upload of the local snapshot; the PENDING snapshot row is dropped (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchval(Q["rollback_actor_suspend"], ref.atespace, ref.name, operation_id, error)
            await connection.execute(Q["delete_pending_snapshot"], snapshot_id)
            await connection.execute(Q["finish_operation"], operation_id, "failed", error, None)
