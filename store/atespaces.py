"""Atespaces: the isolation boundary and namespace of actors and templates."""

from __future__ import annotations

import asyncpg

from store.errors import AlreadyExists, FailedPrecondition, NotFound
from store.records import AtespaceRecord
from store.sql import QUERIES as Q


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class Atespaces:
    """create, get, all and delete."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, name: str) -> AtespaceRecord:
        """Create an atespace. Raises AlreadyExists."""
        row = await self.pool.fetchrow(Q["create_atespace"], name)
        if row is None:
            raise AlreadyExists(f"atespace {name} already exists")
        return AtespaceRecord(name=row["name"], created_at=row["created_at"])

    async def get(self, name: str) -> AtespaceRecord:
        """One atespace. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_atespace"], name)
        if row is None:
            raise NotFound(f"atespace {name} not found")
        return AtespaceRecord(name=row["name"], created_at=row["created_at"])

    async def all(self) -> list[AtespaceRecord]:
        """Every atespace, by name."""
        rows = await self.pool.fetch(Q["list_atespaces"])
        return [AtespaceRecord(name=r["name"], created_at=r["created_at"]) for r in rows]

    async def delete(self, name: str) -> None:
        """Delete an empty atespace. Raises NotFound, FailedPrecondition (actors or templates remain)."""
        await self.get(name)
        row = await self.pool.fetchrow(Q["delete_atespace"], name)
        if row is None:
            usage = await self.pool.fetchrow(Q["atespace_usage"], name)
            raise FailedPrecondition(
                f"atespace {name} is not empty: it still holds {_count(usage['actors'], 'actor')} and "
                f"{_count(usage['templates'], 'template')}; delete them first"
            )
