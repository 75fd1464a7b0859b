"""`Store`: the only user of asyncpg. Named queries in, dataclasses and store errors out.

This module holds the connection pool and the plain reads and writes (atespaces, templates,
actors, nodes, workers). State transitions live in the mixins: `transitions` (resume, suspend),
`pause` (pause, pinned nodes), `golden` (golden snapshots), `lifecycle` (revert, crash, drain, tags, history, GC), `uploads` (the
background upload of an async suspend), on top of `placement`.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from activities.store.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
)
from activities.store.golden import GoldenMixin
from activities.store.lifecycle import FencingOrder, LifecycleMixin
from activities.store.placement import limits_of
from activities.store.records import (
    ActorRecord,
    AtespaceRecord,
    TemplateRecord,
    WorkerRecord,
    WorkerRegistration,
)
from activities.store.snapshot_names import commit_scope_of, snapshot_uri
from activities.store.sql import QUERIES as Q
from activities.store.transitions import TransitionsMixin
from activities.store.uploads import UploadsMixin
from domain.refs import ActorRef


async def _init_connection(connection: asyncpg.Connection) -> None:
    await connection.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class Store(TransitionsMixin, GoldenMixin, LifecycleMixin, UploadsMixin):
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

    async def ping(self) -> None:
        """Raise when the database does not answer."""
        await self.pool.fetchval("SELECT 1")


__all__ = ["Store", "commit_scope_of", "limits_of", "snapshot_uri"]
