"""What the idle judge of the api-server reads and writes: the actors whose idle policy may act
now, their idle time (the last traffic any router replica reported, or their last resume), and
an actor's own idle policy (ARCHITECTURE.md, "Actors on their own"; `domain.idle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.idle import IdlePolicy, parse_idle_policy
from domain.refs import ActorRef
from domain.states import ActorState
from store.errors import NotFound
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class IdleActor:
    """An actor whose idle policy may act now: its resting state, its policy (its own or its
    template's) and how long it has been idle (seconds)."""

    actor: ActorRef
    state: ActorState
    policy: IdlePolicy
    idle_seconds: float


class Idleness:
    """candidates and set_policy (the routers' traffic is written by `Actors.touch`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def candidates(self, limit: int = 1000) -> list[IdleActor]:
        """RUNNING, FROZEN and PAUSED actors with no operation in flight whose policy's next step
        (beyond their resting state) is due, the longest idle first (at most `limit`); the caller
        picks that step again (`IdlePolicy.next_step_in`). A stored policy that no longer parses is
        skipped."""
        found = []
        for row in await self.pool.fetch(Q["idle_candidates"], limit):
            try:
                policy = parse_idle_policy(row["policy"])
            except ValueError:
                continue
            found.append(
                IdleActor(ActorRef(row["atespace"], row["name"]), ActorState(row["state"]), policy, row["idle_seconds"])
            )
        return found

    async def set_policy(self, ref: ActorRef, policy: IdlePolicy | None) -> None:
        """Give the actor its own idle policy (`IdlePolicy()`: off for it), or None: its
        template's again.

        Raises:
            NotFound: unknown actor.
        """
        document: list[dict[str, Any]] | None = None if policy is None else policy.document()
        if await self.pool.fetchval(Q["set_actor_idle_policy"], ref.atespace, ref.name, document) is None:
            raise NotFound(f"actor {ref.key} not found")
