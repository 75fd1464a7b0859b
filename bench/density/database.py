"""What the density run reads from the stack's PostgreSQL: the golden snapshot, table sizes."""

from __future__ import annotations

import json
from typing import Any

from bench.density.workload import ATESPACE, TEMPLATE


async def golden(dsn: str) -> tuple[str, dict[str, Any]]:
    """The template's golden snapshot URI and spec, from Postgres."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT s.uri, t.spec FROM actor_templates t JOIN snapshots s ON s.id = t.golden_snapshot_id "
            "WHERE t.atespace = $1 AND t.name = $2",
            ATESPACE,
            TEMPLATE,
        )
    finally:
        await conn.close()
    return row["uri"], json.loads(row["spec"])


async def db_sizes(dsn: str) -> dict[str, Any]:
    """Actor count, and rows and total bytes (heap, indexes, TOAST) of the per-actor tables."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        actors = await conn.fetchval("SELECT count(*) FROM actors")
        tables = {}
        for t in ("actors", "snapshots", "operations", "placements", "workers", "actor_templates"):
            tables[t] = {
                "rows": await conn.fetchval(f"SELECT count(*) FROM {t}"),
                "bytes": await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", t),
                "tuple_bytes": float(await conn.fetchval(f"SELECT coalesce(avg(pg_column_size(x.*)), 0) FROM {t} x")),
            }
        database = await conn.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await conn.close()
    per_actor = sum(tables[t]["bytes"] for t in ("actors", "snapshots", "operations")) / max(actors, 1)
    return {"actors": actors, "tables": tables, "database_bytes": database, "bytes_per_actor": per_actor}
