"""ExecInActor's records: where an exec runs (the RUNNING actor's worker), and its entry in the
actor's history (who ran what, and how it ended). An exec changes no actor state.
"""

from __future__ import annotations

import asyncpg

from domain.operations.exec import EXEC_WORKFLOW, not_running
from domain.refs import ActorRef, WorkerRef
from domain.states import ActorState
from store.errors import FailedPrecondition, NotFound
from store.placement import Placement
from store.sql import QUERIES as Q


class Execs:
    """begin and finish of an exec."""

    def __init__(self, pool: asyncpg.Pool, placement: Placement) -> None:
        self.pool = pool
        self.placement = placement

    async def begin(self, ref: ActorRef, operation_id: str, reason: str) -> WorkerRef:
        """The worker of the RUNNING actor `ref`, with the exec recorded in its history as
        `reason` (`by alice: cat /data/count.txt`; idempotent per operation).

        Raises:
            NotFound: unknown actor.
            FailedPrecondition: the actor is not RUNNING, or an operation holds it (the message
                names its state and what to do).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            actor = await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            if actor is None:
                raise NotFound(f"actor {ref.key} not found")
            state = actor["state"]
            if state != ActorState.RUNNING or actor["worker_id"] is None:
                raise FailedPrecondition(not_running(ref, state))
            if actor["operation"] is not None:
                raise FailedPrecondition(f"actor {ref.key} is being moved ({actor['operation']}); exec once it "
                                         "rests RUNNING again")  # fmt: skip
            worker = await self.placement.worker_ref(connection, actor["worker_id"])
            await connection.execute(
                Q["insert_operation"], operation_id, ref.atespace, ref.name, EXEC_WORKFLOW,
                f"{worker.pool}/{worker.name}", reason,
            )  # fmt: skip
            return worker

    async def finish(self, operation_id: str, outcome: str, error: str | None = None) -> None:
        """Records how the exec ended (`exit 0`, `exit 3`, `timeout`, `suspended`; `failed`
        with `error` when it could not run); a repeat changes nothing."""
        await self.pool.execute(Q["finish_operation"], operation_id, outcome, error, None)
