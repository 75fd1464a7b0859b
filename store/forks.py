"""Forks (issue 30): new actors that start from another actor's snapshot, sharing its files
until their own first suspend.

A fork is a row: each new actor is SUSPENDED with the source's snapshot as its latest, so its
first resume restores it, and the snapshot collector keeps that snapshot while any fork rests on
it (`garbage_snapshots`: an actor's latest is never garbage). Nothing is copied at fork time:
the snapshot's files stay where they are (object-storage snapshots are downloaded once per node
into the atelet's cache and shared there); a fork's first suspend writes its own generation 1.
The reference system's "create from tag" works the same way (a tag is a named fork point).
"""

from __future__ import annotations

import asyncpg

from domain.refs import ActorRef
from store.errors import AlreadyExists, FailedPrecondition, NotFound
from store.records import ActorRecord
from store.snapshot_listing import kept_generation
from store.sql import QUERIES as Q


class Forks:
    """create."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, source: ActorRef, names: list[str], generation: int | None = None) -> list[ActorRecord]:
        """Create actors `names` (in `source`'s atespace, with its template, worker selector, idle
        and egress policies), each starting from the source's snapshot of `generation` (a kept
        COMPLETED generation of its own) or, when None, from its latest COMPLETED snapshot. All or
        none: one transaction, under the source's row lock (as the collector claims a snapshot).

        Raises:
            NotFound: no actor `source`.
            InvalidArgument: `generation` is not kept (field `generation`, the kept ones listed).
            FailedPrecondition: the source has no completed snapshot yet.
            AlreadyExists: one of `names` is taken (none is created).
        """
        async with self.pool.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(Q["lock_actor"], source.atespace, source.name)
            if row is None:
                raise NotFound(f"actor {source.key} not found")
            if generation is not None:
                snapshot_id = await kept_generation(connection, source, generation, field="generation")
            else:
                latest = await connection.fetchrow(Q["get_snapshot"], row["latest_snapshot_id"]) if row[
                    "latest_snapshot_id"] is not None else None  # fmt: skip
                if latest is None or latest["state"] != "COMPLETED":
                    raise FailedPrecondition(
                        f"actor {source.key} has no completed snapshot to fork yet; suspend it first "
                        f"('ate suspend actor {source.name} -a {source.atespace}')"
                    )
                snapshot_id = latest["id"]
            for name in names:
                created = await connection.fetchval(Q["fork_actor"], source.atespace, source.name, name, snapshot_id)
                if created is None:
                    raise AlreadyExists(
                        f"actor {source.atespace}/{name} already exists; no actor was forked",
                        {"field": "name", "taken": name},
                    )
        records = []
        for name in names:
            got = await self.pool.fetchrow(Q["get_actor"], source.atespace, name)
            assert got is not None
            records.append(ActorRecord.from_row(got))
        return records
