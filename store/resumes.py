"""ResumeActor's transitions: SUSPENDED|PAUSED -> RESUMING bound to a worker, -> RUNNING, or
back after a failed restore.

Each runs in one transaction that locks the actor row, checks the state-machine edge against
`domain.states.TRANSITIONS` and writes the intent before the caller's side effect; each is
idempotent for its operation ID, so an activity retried after any crash finds its own earlier
write and returns the same answer.
"""

from __future__ import annotations

import asyncpg

from domain.liveness import unreachable_message
from domain.operations.resume import ResumePlan, ResumeProgress
from domain.refs import ActorRef
from domain.states import TRANSITIONS, ActorState, Operation
from store.errors import (
    ActorUnreachable,
    FailedPrecondition,
    NoCapacity,
    NotFound,
    VersionConflict,
    refused,
)
from store.pinning import Pinning
from store.placement import Placement, demand_of
from store.records import spec_of
from store.snapshots import Snapshots
from store.sql import QUERIES as Q

RESUME = TRANSITIONS[Operation.RESUME]


class Resumes:
    """begin, finish and rollback of a resume."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement, snapshots: Snapshots, pinning: Pinning) -> None:
        self.pool = pool
        self.placement = placement
        self.snapshots = snapshots
        self.pinning = pinning

    async def begin(self, ref: ActorRef, operation_id: str, waited_for_room: bool = False) -> ResumePlan:
        """SUSPENDED|PAUSED -> RESUMING bound to a worker, in one transaction (idempotent per operation);
        FROZEN -> RESUMING on the worker it holds (`ResumePlan.thaw`: the caller thaws the sandbox).
        `waited_for_room`: the resume joined the room queue, which its bind leaves.

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor's state does not allow a resume, or its template has
                no golden snapshot yet.
            NoCapacity: no worker has room (PinnedNodeFull: its pinned node is full, others are not).
            ActorUnreachable: the actor waits for its node to answer again (not final).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            spec = spec_of(actor)
            if state == ActorState.RUNNING:
                worker = await self.placement.worker_ref(connection, actor["worker_id"])
                return ResumePlan(already_running=True, worker=worker, spec=spec)
            # A paused actor (or an async-suspended one whose upload has not landed) restores its
            # local snapshot, on the node that holds it.
            snapshot_id, pinned = restore_point(actor)
            if state == ActorState.RESUMING and actor["operation_id"] == operation_id:
                worker = await self.placement.worker_ref(connection, actor["worker_id"])
                if actor["resumed_from"] == ActorState.FROZEN:
                    return ResumePlan(already_running=False, worker=worker, spec=spec, thaw=True)
                snapshot = await self.snapshots.ref(connection, snapshot_id) if snapshot_id else None
                return ResumePlan(already_running=False, worker=worker, snapshot=snapshot, spec=spec,
                                  template=actor["template"])  # fmt: skip
            if state == ActorState.FROZEN:
                return await self._thaw(connection, ref, actor, operation_id)
            if state == ActorState.CRASHED:
                reason = actor["last_error"] or "no reason recorded"
                revert = f"'ate revert actor {ref.name} -a {ref.atespace}'"
                hint = "" if revert in reason else f"; bring it back to its last completed snapshot with {revert}"
                raise FailedPrecondition(f"actor {ref.key} is CRASHED ({reason}){hint}", {"state": state})
            if state == ActorState.UNREACHABLE:
                raise await unreachable(connection, ref)
            if not RESUME.allows(state):
                raise refused(RESUME, ref.key, state)
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
            snapshot = await self.snapshots.ref(connection, snapshot_id)
            demand = demand_of(f"the actor {ref.key}", spec, actor["worker_selector"], snapshot, pinned)
            try:
                worker_id = await self.placement.place(
                    connection, holder=holder, operation_id=operation_id, demand=demand, waited=waited_for_room
                )
            except NoCapacity as error:
                if pinned is None:
                    raise
                why = await self.pinning.no_room(connection, ref, actor, demand, error)
                if why is error:  # no room anywhere: the placement's own message says it
                    raise
                raise why from error
            updated = await connection.fetchval(
                Q["mark_actor_resuming"], ref.atespace, ref.name, actor["version"], worker_id, operation_id
            )
            if updated is None:
                raise VersionConflict("concurrent update conflict, please retry")
            worker = await self.placement.worker_ref(connection, worker_id)
            await connection.execute(
                Q["insert_operation"],
                operation_id,
                ref.atespace,
                ref.name,
                Operation.RESUME.value,
                f"{worker.pool}/{worker.name}",
                None,
            )
            return ResumePlan(already_running=False, worker=worker, snapshot=snapshot, spec=spec,
                              template=actor["template"])  # fmt: skip

    async def _thaw(
        self, connection: asyncpg.Connection, ref: ActorRef, actor: asyncpg.Record, operation_id: str
    ) -> ResumePlan:
        """FROZEN -> RESUMING on the worker that holds its sandbox (no placement: the caller thaws
        the sandbox in place, then marks it RUNNING)."""
        worker = await self.placement.worker_ref(connection, actor["worker_id"])
        updated = await connection.fetchval(
            Q["mark_actor_thawing"], ref.atespace, ref.name, actor["version"], operation_id
        )
        if updated is None:
            raise VersionConflict("concurrent update conflict, please retry")
        await connection.execute(
            Q["insert_operation"], operation_id, ref.atespace, ref.name, Operation.RESUME.value,
            f"{worker.pool}/{worker.name} (thaw)", None,
        )  # fmt: skip
        return ResumePlan(already_running=False, worker=worker, spec=spec_of(actor), thaw=True)

    async def finish(self, ref: ActorRef, operation_id: str) -> None:
        """RESUMING -> RUNNING for this operation (idempotent: a repeat finds RUNNING).

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor is no longer held by this operation.
        """
        # One transaction: its commit NOTIFYs the actor RUNNING (the api-server answers the resume
        # on it, api/actor_changes.py), and by then the operation is recorded finished too.
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["mark_actor_running"], ref.atespace, ref.name, operation_id)
            await connection.execute(Q["finish_operation"], operation_id, "ok", None, None)
        if updated is None:
            row = await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name)
            if row is None:
                raise NotFound(f"actor {ref.key} not found")
            if _running_under(row, operation_id):
                return
            raise FailedPrecondition(
                f"actor {ref.key} is no longer resuming under operation {operation_id} (state: {row['state']})"
            )

    async def finished(self, ref: ActorRef, operation_id: str) -> bool:
        """Whether this operation already marked the actor RUNNING (`finish` committed); False
        for an unknown actor or one in any other state or under another operation."""
        return _running_under(await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name), operation_id)

    async def progress(self, ref: ActorRef, operation_id: str) -> ResumeProgress:
        """How far this operation got: RUNNING under it (`finish` committed), or RESUMING under
        it on a worker (bound, not finished), or neither (nothing of it is left to undo)."""
        async with self.pool.acquire() as connection:
            row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
            running = _running_under(row, operation_id)
            bound = row is not None and row["state"] == ActorState.RESUMING and row["operation_id"] == operation_id
            if row is None or not (running or bound) or row["worker_id"] is None:
                return ResumeProgress(running=False)
            return ResumeProgress(
                running=running,
                worker=await self.placement.worker_ref(connection, row["worker_id"]),
                thaw=bound and row["resumed_from"] == ActorState.FROZEN,
            )

    async def rollback_thaw(self, ref: ActorRef, operation_id: str, error: str) -> None:
        """RESUMING -> FROZEN after a thaw that failed for good: the sandbox keeps its worker, its
        place and its memory; the next resume thaws it again (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchval(Q["rollback_actor_thaw"], ref.atespace, ref.name, operation_id, error)
            await connection.execute(Q["finish_operation"], operation_id, "failed", error, None)

    async def rollback(self, ref: ActorRef, operation_id: str, error: str) -> None:
        """RESUMING -> SUSPENDED (PAUSED when it came from there) after a failed resume; frees
        the place (idempotent)."""
        async with self.pool.acquire() as connection, connection.transaction():
            updated = await connection.fetchval(Q["rollback_actor_resume"], ref.atespace, ref.name, operation_id, error)
            placement = await connection.fetchrow(Q["get_placement"], ref.workflow_id)
            if placement is not None and (updated is not None or placement["operation_id"] == operation_id):
                await connection.execute(Q["delete_placement"], ref.workflow_id)
            await connection.execute(Q["finish_operation"], operation_id, "failed", error, None)


def restore_point(actor: asyncpg.Record) -> tuple[int | None, str | None]:
    """What a resume of a `lock_actor` row restores, and the node that pins it: its local snapshot
    (paused, or async-suspended and not uploaded yet) on that node, else its latest snapshot, else
    its template's golden one, anywhere."""
    local_id = actor["local_snapshot_id"] or actor["pending_upload_snapshot_id"]
    snapshot_id: int | None = local_id or actor["latest_snapshot_id"] or actor["golden_snapshot_id"]
    return snapshot_id, actor["pinned_node"] if local_id else None


def _running_under(row: asyncpg.Record | None, operation_id: str) -> bool:
    """Whether the actor row says RUNNING, marked so by `operation_id` (its `finish` committed)."""
    return row is not None and row["state"] == ActorState.RUNNING and row["operation_id"] == operation_id


async def unreachable(connection: asyncpg.Connection, ref: ActorRef) -> ActorUnreachable:
    """The error for a request to an UNREACHABLE actor: its node, how long it has been silent,
    how much of the grace is left (`domain.liveness.unreachable_message`)."""
    row = await connection.fetchrow(Q["actor_unreachable"], ref.atespace, ref.name)
    if row is None:  # it left UNREACHABLE meanwhile: the caller's retry finds where it went
        return ActorUnreachable(f"actor {ref.key} was UNREACHABLE; retry", {"state": ActorState.UNREACHABLE.value})
    return ActorUnreachable(
        unreachable_message(ref.key, row["node"], row["silent_seconds"], row["remaining_seconds"]),
        {
            "state": ActorState.UNREACHABLE.value,
            "node": row["node"],
            "grace_left_seconds": round(row["remaining_seconds"]),
        },
    )
