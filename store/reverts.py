"""RevertActor's transitions: any revertable state -> REVERTING (the in-progress PENDING snapshot
dropped), -> SUSPENDED with the last COMPLETED snapshot, or with a kept earlier generation of the
actor's own (`to_generation`, which also takes a SUSPENDED actor).

Idempotent for the operation ID: a repeat finds REVERTING (or SUSPENDED) under its own ID, and a
revert that died (REVERTING under another ID) is taken over.
"""

from __future__ import annotations

import asyncpg

from domain.operations.revert import RevertPlan
from domain.refs import ActorRef
from domain.states import TRANSITIONS, ActorState, Operation
from store.errors import FailedPrecondition, NotFound
from store.nodes import Nodes
from store.placement import Placement
from store.snapshot_listing import kept_generation
from store.sql import QUERIES as Q

REVERT = TRANSITIONS[Operation.REVERT]


class Reverts:
    """begin and finish of a revert."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement, nodes: Nodes) -> None:
        self.pool = pool
        self.placement = placement
        self.nodes = nodes

    async def begin(self, ref: ActorRef, operation_id: str, to_generation: int | None = None) -> RevertPlan:
        """Mark REVERTING (from any revertable state) and drop the in-progress snapshot; with
        `to_generation`, also from SUSPENDED, and that generation becomes the actor's latest.

        Raises:
            NotFound: unknown actor.
            InvalidArgument: `to_generation` is not a kept COMPLETED generation of the actor's
                own (the message lists those kept); nothing changed.
            FailedPrecondition: `actor is not in a revertable state (state: X)` (the reference
                system's words).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            target = None
            if to_generation is not None and not (
                state == ActorState.REVERTING and actor["operation_id"] == operation_id
            ):  # under the actor's lock, as the collector claims: the generation cannot go meanwhile
                target = await kept_generation(connection, ref, to_generation)
            # An async-suspended actor whose snapshot is not uploaded yet may be pinned to a dead
            # node: reverting drops that snapshot and unpins it.
            pending_upload = state == ActorState.SUSPENDED and actor["pending_upload_snapshot_id"] is not None
            if state == ActorState.REVERTING and actor["operation_id"] == operation_id:
                from_state = ActorState.REVERTING.value
            elif REVERT.allows(state) or pending_upload or (target is not None and state == ActorState.SUSPENDED):
                from_state = state
                await connection.execute(Q["mark_actor_reverting"], ref.atespace, ref.name, operation_id)
                if target is not None:
                    await connection.execute(Q["set_latest_snapshot"], ref.atespace, ref.name, target)
                if actor["operation_id"] is not None:  # the operation it takes over ends here
                    await connection.execute(
                        Q["finish_operation"], actor["operation_id"], "superseded",
                        f"a revert took over (operation {operation_id})", None,
                    )  # fmt: skip
                if actor["in_progress_snapshot_id"] is not None:  # a PENDING snapshot is discarded
                    await connection.execute(Q["delete_pending_snapshot"], actor["in_progress_snapshot_id"])
                await connection.execute(
                    Q["insert_operation"], operation_id, ref.atespace, ref.name, Operation.REVERT.value, None, None
                )
            else:
                raise FailedPrecondition(
                    f"actor {ref.key} is not in a revertable state (state: {state}); RevertActor takes "
                    "RUNNING, UNREACHABLE, PAUSED, CRASHED, a stuck RESUMING/SUSPENDING/PAUSING actor, or with "
                    "--to-generation a SUSPENDED one",
                    {"state": state},
                )
            worker = None
            alive = False
            if actor["worker_id"] is not None:
                worker = await self.placement.worker_ref(connection, actor["worker_id"])
                alive = await self.nodes.alive(connection, worker.node)
            return RevertPlan(from_state=from_state, worker=worker, node_alive=alive)

    async def finish(self, ref: ActorRef, operation_id: str, note: str, recovery_of: str | None = None) -> None:
        """REVERTING -> SUSPENDED with the last COMPLETED snapshot; place freed (idempotent).

        Args:
            note: recorded as the actor's last error (the error before it kept in brackets).
            recovery_of: an automatic recovery's crash reason: recorded with the operation, so
                the actor's history says what was lost and why.

        Raises:
            FailedPrecondition: the actor is no longer reverting under this operation.
        """
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["mark_actor_reverted"], ref.atespace, ref.name, operation_id, note)
            placement = await connection.fetchrow(Q["get_placement"], ref.workflow_id)
            if placement is not None:
                await connection.execute(Q["delete_placement"], ref.workflow_id)
            if updated is None:
                row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
                if row is None or row["state"] != ActorState.SUSPENDED:
                    raise FailedPrecondition(f"actor {ref.key} is no longer reverting under operation {operation_id}")
            recorded = None
            if recovery_of is not None:
                recorded = (
                    f"automatic recovery (onCrash: Revert) from the crash: {recovery_of}; what the actor did since "
                    "its last completed snapshot is lost"
                )
            await connection.execute(Q["finish_operation"], operation_id, "ok", recorded, None)
