"""Tags: named pointers to COMPLETED snapshots, and actors started from them."""

from __future__ import annotations

import asyncpg

from domain.refs import ActorRef
from store.errors import AlreadyExists, FailedPrecondition, NotFound
from store.records import TagRecord
from store.sql import QUERIES as Q


class Tags:
    """create, get, of_atespace and start_from."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, ref: ActorRef, tag: str) -> TagRecord:
        """Tag the actor's latest COMPLETED snapshot as `<atespace>/<tag>`.

        Raises:
            NotFound: unknown actor. FailedPrecondition: no COMPLETED snapshot yet.
            AlreadyExists: the tag exists.
        """
        # under the actor's lock, as the snapshot collector claims a snapshot: the latest cannot
        # change (and so become garbage) between reading it and tagging it
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.fetchrow(Q["lock_actor"], ref.atespace, ref.name)
            row = await connection.fetchrow(Q["get_actor"], ref.atespace, ref.name)
            if row is None:
                raise NotFound(f"actor {ref.key} not found")
            if row["snapshot_id"] is None or row["snapshot_state"] != "COMPLETED":
                raise FailedPrecondition(
                    f"actor {ref.key} has no completed snapshot to tag yet; suspend it first "
                    f"('ate suspend actor {ref.name} -a {ref.atespace}')"
                )
            created = await connection.fetchrow(Q["create_tag"], ref.atespace, tag, row["snapshot_id"], ref.name)
        if created is None:
            raise AlreadyExists(f"tag {ref.atespace}/{tag} already exists")
        return await self.get(ref.atespace, tag)

    async def get(self, atespace: str, tag: str) -> TagRecord:
        """One tag. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_tag"], atespace, tag)
        if row is None:
            raise NotFound(f"tag {atespace}/{tag} not found")
        return TagRecord.from_row(row)

    async def of_atespace(self, atespace: str) -> list[TagRecord]:
        """The tags of an atespace."""
        return [TagRecord.from_row(r) for r in await self.pool.fetch(Q["list_tags"], atespace)]

    async def start_from(self, ref: ActorRef, tag: TagRecord) -> None:
        """Make a just-created actor start from a tag's snapshot (its first resume restores it)."""
        await self.pool.execute(Q["set_actor_snapshot"], ref.atespace, ref.name, tag.snapshot_id)
