"""What the density run reads from the stack's PostgreSQL: the golden snapshot, table sizes."""

from __future__ import annotations

from typing import Any

from bench.common import measurements
from bench.density.workload import ATESPACE, TEMPLATE


async def golden(dsn: str) -> tuple[str, dict[str, Any]]:
    """The template's golden snapshot URI and spec, from Postgres."""
    async with measurements(dsn) as db:
        return await db.golden_snapshot(ATESPACE, TEMPLATE)


async def db_sizes(dsn: str) -> dict[str, Any]:
    """Actor count, and rows and total bytes (heap, indexes, TOAST) of the per-actor tables."""
    async with measurements(dsn) as db:
        actors = await db.actor_count()
        tables = await db.table_sizes()
        database = await db.database_bytes()
    per_actor = sum(tables[t]["bytes"] for t in ("actors", "snapshots", "operations")) / max(actors, 1)
    return {"actors": actors, "tables": tables, "database_bytes": database, "bytes_per_actor": per_actor}
