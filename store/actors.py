"""Actors: create, read, page through, change the selector of, delete, and mark active (state
changes are the operations' transitions: `resumes`, `suspends`, `pauses`, `reverts`...)."""

from __future__ import annotations

import asyncpg

from domain.egress import EgressPolicy
from domain.idle import IdlePolicy
from domain.refs import ActorRef
from store.errors import AlreadyExists, FailedPrecondition, NotFound
from store.records import ActorRecord
from store.sql import QUERIES as Q
from store.templates import Templates


class Actors:
    """create, get, page, update_selector, delete and touch."""

    def __init__(self, pool: asyncpg.Pool, templates: Templates) -> None:
        self.pool = pool
        self.templates = templates

    async def create(
        self, ref: ActorRef, template: str, worker_selector: dict[str, str], idle: IdlePolicy | None = None,
        egress: EgressPolicy | None = None,
    ) -> ActorRecord:  # fmt: skip
        """Create an actor in SUSPENDED with its own idle policy `idle` (None: its template's;
        `IdlePolicy()`: off for it) and its own egress policy `egress` (None: its template's;
        the caller checked it lies within). Raises NotFound (atespace, template), AlreadyExists."""
        await self.templates.get(ref.atespace, template)
        own = None if idle is None else idle.document()
        egress_own = None if egress is None else egress.document()
        row = await self.pool.fetchrow(
            Q["create_actor"], ref.atespace, ref.name, template, worker_selector, own, egress_own
        )
        if row is None:
            raise AlreadyExists(f"actor {ref.key} already exists")
        return await self.get(ref)

    async def get(self, ref: ActorRef) -> ActorRecord:
        """One actor (primary-key lookup). Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_actor"], ref.atespace, ref.name)
        if row is None:
            raise NotFound(f"actor {ref.key} not found")
        return ActorRecord.from_row(row)

    async def page(
        self, atespaces: str | set[str] | None, after: tuple[str, str] | None, limit: int, state: str | None = None
    ) -> tuple[list[ActorRecord], tuple[str, str] | None]:
        """One page of actors in key order.

        Args:
            atespaces: only this atespace or these atespaces, or None for all.
            after: the (atespace, name) key of the last actor of the previous page.
            limit: page size (1..1000).
            state: only actors in this state (RUNNING...), or None for all (index actors_state_idx).

        Returns:
            (actors, key to pass as `after` for the next page, or None at the end).
        """
        start = after or ("", "")
        only = [atespaces] if isinstance(atespaces, str) else sorted(atespaces) if atespaces is not None else None
        rows = await self.pool.fetch(Q["list_actors"], only, start[0], start[1], limit + 1, state)
        actors = [ActorRecord.from_row(r) for r in rows[:limit]]
        next_key = (actors[-1].atespace, actors[-1].name) if len(rows) > limit else None
        return actors, next_key

    async def update_selector(self, ref: ActorRef, worker_selector: dict[str, str]) -> ActorRecord:
        """Replace the actor's worker_selector. Raises NotFound."""
        row = await self.pool.fetchrow(Q["update_actor_selector"], ref.atespace, ref.name, worker_selector)
        if row is None:
            raise NotFound(f"actor {ref.key} not found")
        return await self.get(ref)

    async def set_egress_policy(self, ref: ActorRef, policy: EgressPolicy | None) -> None:
        """Give the actor its own egress policy (the caller checked it lies within its
        template's; `EgressPolicy()`: none for it), or None: its template's again. The node's
        egress proxy applies it from the next connection. Raises NotFound."""
        document = None if policy is None else policy.document()
        if await self.pool.fetchval(Q["set_actor_egress_policy"], ref.atespace, ref.name, document) is None:
            raise NotFound(f"actor {ref.key} not found")

    async def delete(self, ref: ActorRef) -> None:
        """Delete a SUSPENDED actor. Raises NotFound, FailedPrecondition (other states)."""
        actor = await self.get(ref)
        row = await self.pool.fetchrow(Q["delete_actor"], ref.atespace, ref.name)
        if row is None:
            raise FailedPrecondition(
                f"actor {ref.key} is not suspended (state: {actor.state}); suspend it first",
                {"state": actor.state},
            )

    async def touch_egress_active(self, node: str, placed: list[tuple[str, ActorRef]]) -> int:
        """Node `node`'s egress proxy saw outbound traffic of `placed` ((worker name, actor)
        pairs) since its last heartbeat, or some is in flight: set their `last_active_at` to now,
        for each actor that is placed on that worker of that node only (a node cannot keep
        awake an actor it does not hold). Locks as `touch`.

        Returns:
            How many actor rows were touched.
        """
        if not placed:
            return 0
        result: str = await self.pool.execute(
            Q["touch_egress_active"], node, [w for w, _ in placed], [a.atespace for _, a in placed],
            [a.name for _, a in placed],
        )  # fmt: skip
        return int(result.rsplit(" ", 1)[-1])

    async def touch(self, actors: list[ActorRef]) -> int:
        """A router replica saw traffic for `actors` since its last heartbeat: set their
        `last_active_at` to now, in one statement (rows locked in key order, so that replicas
        touching the same actors at once never deadlock). Unknown actors are skipped; no NOTIFY
        (the trigger announces state and worker changes only).

        Returns:
            How many actor rows were touched.
        """
        if not actors:
            return 0
        result: str = await self.pool.execute(
            Q["touch_actors"], [a.atespace for a in actors], [a.name for a in actors]
        )
        return int(result.rsplit(" ", 1)[-1])
